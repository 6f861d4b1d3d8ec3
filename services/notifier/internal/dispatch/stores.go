package dispatch

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
)

// Delivered remembers which (route, receiver, event) triples were settled
// (delivered or dead-lettered), so a message redelivered after a crash
// between sending and acking is not sent twice, and a dead letter replayed
// after a fix is sent once.
type Delivered interface {
	State(ctx context.Context, key string) (Record, error)
	// States reads many records at once: out[i] is the record of keys[i].
	// On an error the keys it could not read are RecordNone.
	States(ctx context.Context, keys []string) ([]Record, error)
	Mark(ctx context.Context, keys []string, r Record) error
}

// Record is what the delivered-id bucket says about one triple.
type Record string

// Records. Any record means "settled": the normal path skips it. Only
// RecordDelivered stops a replay of the triple's dead letter.
const (
	RecordNone         Record = ""
	RecordDelivered    Record = "delivered"
	RecordDeadLettered Record = "dead"
)

// DeliveredKey is the KV key of one triple: a hash, because ids and route
// names may hold characters KV keys do not allow.
func DeliveredKey(cluster, route, receiver, id string) string {
	h := sha256.Sum256([]byte(cluster + "\x00" + route + "\x00" + receiver + "\x00" + id))
	return receiver + "." + hex.EncodeToString(h[:20])
}

// KVDelivered keeps the records in a JetStream KV bucket whose TTL bounds
// how long they are kept.
type KVDelivered struct {
	KV jetstream.KeyValue
	// Async, if set, reads States' records with batched direct gets (one
	// request for up to StatesBatch keys) and writes Mark's records as asynchronous publishes to the
	// bucket's subjects ($KV.<bucket>.<key>, what KV.Put publishes), all in
	// flight at once up to its PublishAsyncMaxPending, instead of Parallel
	// puts that each wait for their answer. Use a JetStream context of its
	// own (NewAsyncRecorder): its pending limit and ack timeout are Mark's.
	Async jetstream.JetStream
	// Parallel bounds concurrent puts when marking a large batch without
	// Async, and when rewriting what an asynchronous write did not store.
	Parallel int
	// StatesBatch is the most keys per batched read (default and at most
	// 1,000: the server answers at most 1,024 subjects per request).
	StatesBatch int
	// BatchRetry is how long reads go key by key after a batched read
	// failed (default batchRetry), before batching is tried again: a
	// refused subject costs one unanswered read per BatchRetry, and a read
	// that timed out on a loaded server does not turn batching off for good.
	BatchRetry time.Duration
	// Log says when batched reads failed and are off.
	Log zerolog.Logger

	batchOffUntil atomic.Int64 // Unix ns: a batched read failed, key by key until then
}

// batchRetry is KVDelivered.BatchRetry's default.
const batchRetry = time.Minute

func (d *KVDelivered) batchOff() bool { return time.Now().UnixNano() < d.batchOffUntil.Load() }

// turnBatchOff stops batched reads for BatchRetry; it reports whether they
// were on.
func (d *KVDelivered) turnBatchOff() bool {
	retry := d.BatchRetry
	if retry <= 0 {
		retry = batchRetry
	}
	now := time.Now().UnixNano()
	return d.batchOffUntil.Swap(now+int64(retry)) < now
}

// NewAsyncRecorder is the JetStream context of KVDelivered.Async: up to
// pending records in flight, each given up on after timeout (then rewritten
// with a put).
func NewAsyncRecorder(nc *nats.Conn, pending int, timeout time.Duration) (jetstream.JetStream, error) {
	return jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(pending), jetstream.WithPublishAsyncTimeout(timeout))
}

// DeliveredBucket is the KV bucket's name.
const DeliveredBucket = "opswire-notifier-delivered"

// EnsureDeliveredBucket creates or updates the bucket.
func EnsureDeliveredBucket(ctx context.Context, js jetstream.JetStream, ttl time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: DeliveredBucket, Description: "opswire notifier: events already delivered per route and receiver",
		TTL: ttl, History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", DeliveredBucket, err)
	}
	return kv, nil
}

// State returns the record of key (RecordNone if there is none). Records
// written before records had values (a single byte) count as dead-lettered:
// settled, and still replayable.
func (d *KVDelivered) State(ctx context.Context, key string) (Record, error) {
	e, err := d.KV.Get(ctx, key)
	switch {
	case err == nil:
		if Record(e.Value()) == RecordDelivered {
			return RecordDelivered, nil
		}
		return RecordDeadLettered, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return RecordNone, nil
	}
	return RecordNone, err
}

// States reads the records of keys. With Async, each StatesBatch keys are
// one direct get of the last message of each key's subject (the
// "multi_last" batch of nats-server 2.11+, on
// $JS.API.DIRECT.GET.KV_<bucket>), read under the stream's read lock so the
// answer is one consistent view; without Async, or for BatchRetry after a
// batched read failed (an older server, no permission for that subject, no
// answer within batchTimeout), one KV get per key.
func (d *KVDelivered) States(ctx context.Context, keys []string) ([]Record, error) {
	out := make([]Record, len(keys))
	if d.Async == nil || len(keys) < 2 || d.batchOff() {
		return out, d.each(ctx, keys, out)
	}
	size := d.StatesBatch
	if size < 1 || size > 1000 {
		size = 1000
	}
	var firstErr error
	for i := 0; i < len(keys); i += size {
		j := min(i+size, len(keys))
		if d.batchOff() {
			if err := d.each(ctx, keys[i:j], out[i:j]); err != nil && firstErr == nil {
				firstErr = err
			}
			continue
		}
		if err := d.batch(ctx, keys[i:j], out[i:j]); err != nil {
			if ctx.Err() == nil && d.turnBatchOff() {
				d.Log.Warn().Err(err).Str("bucket", d.KV.Bucket()).Dur("retryIn", cmp.Or(d.BatchRetry, batchRetry)).
					Msg("batched reads of delivered records failed; reading them key by key for a while (they need nats-server 2.11+ and permission to publish $JS.API.DIRECT.GET.KV_<bucket>)")
			}
			if err := d.each(ctx, keys[i:j], out[i:j]); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	return out, firstErr
}

// each reads keys one KV get at a time.
func (d *KVDelivered) each(ctx context.Context, keys []string, out []Record) error {
	var firstErr error
	for i, k := range keys {
		r, err := d.State(ctx, k)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out[i] = r
	}
	return firstErr
}

// batch reads keys with one multi_last direct get. The server sends the
// last message of each subject that has one, then a 204 status (or only a
// 404 when none has one).
func (d *KVDelivered) batch(ctx context.Context, keys []string, out []Record) error {
	bucket := d.KV.Bucket()
	prefix := "$KV." + bucket + "."
	subjects := make([]string, len(keys))
	at := make(map[string][]int, len(keys)) // a key may be asked for twice
	for i, k := range keys {
		subjects[i] = prefix + k
		at[subjects[i]] = append(at[subjects[i]], i)
		out[i] = RecordNone
	}
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
		Batch     int      `json:"batch"`
	}{subjects, len(subjects)})
	if err != nil {
		return err
	}
	nc := d.Async.Conn()
	inbox := nc.NewInbox()
	// Room for every answer (at most one per key, then the status): a
	// SubscribeSync would allocate (and zero) its 64k-message channel per read.
	answers := make(chan *nats.Msg, len(keys)+2)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+bucket, inbox, req); err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, batchTimeout)
	defer cancel()
	for {
		var m *nats.Msg
		select {
		case m = <-answers:
		case <-rctx.Done():
			return fmt.Errorf("batched read of %d delivered records: %w", len(keys), rctx.Err())
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			switch m.Header.Get("Status") {
			case "204": // end of the batch
				return nil
			case "404": // none of the keys has a record
				for i := range out {
					out[i] = RecordNone
				}
				return nil
			}
			return fmt.Errorf("batched read of %d delivered records: status %s %s", len(keys), m.Header.Get("Status"), m.Header.Get("Description"))
		}
		idx, ok := at[m.Header.Get(jetstream.SubjectHeader)]
		if !ok {
			return fmt.Errorf("batched read of delivered records: answer for subject %q not asked for", m.Header.Get(jetstream.SubjectHeader))
		}
		r := RecordDeadLettered // as State: anything but "delivered" is settled, replayable
		switch {
		case m.Header.Get(kvOperationHeader) != "": // a delete or purge marker
			r = RecordNone
		case Record(m.Data) == RecordDelivered:
			r = RecordDelivered
		}
		for _, i := range idx {
			out[i] = r
		}
	}
}

// batchTimeout bounds one batched read: the server answers 1,000 keys in
// milliseconds; a request it refuses (no permission) is never answered.
const batchTimeout = 2 * time.Second

// kvOperationHeader marks a KV delete or purge (its value is DEL or PURGE).
const kvOperationHeader = "KV-Operation"

// Seen reports whether key has any record.
func (d *KVDelivered) Seen(ctx context.Context, key string) (bool, error) {
	r, err := d.State(ctx, key)
	return r != RecordNone, err
}

// Mark records keys, all of them in flight at once (Async) or several at a
// time, so a large card is recorded in milliseconds (the window in which a
// crash could still cause a duplicate). It returns nil only when every key
// is stored: a record whose asynchronous write failed or timed out is
// written again with a put.
func (d *KVDelivered) Mark(ctx context.Context, keys []string, r Record) error {
	return d.MarkEach(ctx, keys, r, nil)
}

// markChunk is how many confirmed records MarkEach reports at a time.
const markChunk = 500

// MarkEach is Mark, telling stored (from one goroutine at a time) the
// indexes of keys whose records are stored, as the server confirms them,
// markChunk at a time: their messages can be acknowledged while the rest
// are still being written. A key it never reports was not confirmed stored
// (the error says so).
func (d *KVDelivered) MarkEach(ctx context.Context, keys []string, r Record, stored func(idx []int)) error {
	if d.Async == nil || len(keys) < 2 {
		err := d.put(ctx, keys, r)
		if err == nil {
			report(stored, indexes(len(keys)))
		}
		return err
	}
	type write struct {
		i int
		f jetstream.PubAckFuture // nil: not sent
	}
	writes := make(chan write, len(keys))
	failedCh := make(chan []int, 1)
	go func() { // confirmations in order, while the rest are sent
		var failed, chunk []int
		for w := range writes {
			ok := false
			if w.f != nil {
				select {
				case <-w.f.Ok():
					ok = true
				case <-w.f.Err():
				case <-ctx.Done():
				}
			}
			if !ok {
				failed = append(failed, w.i)
				continue
			}
			if chunk = append(chunk, w.i); len(chunk) >= markChunk && stored != nil {
				stored(chunk)
				chunk = nil
			}
		}
		if len(chunk) > 0 && stored != nil {
			stored(chunk)
		}
		failedCh <- failed
	}()
	prefix := "$KV." + d.KV.Bucket() + "."
	val := []byte(r)
	for i, k := range keys {
		f, err := d.Async.PublishAsync(prefix+k, val, jetstream.WithStallWait(5*time.Second))
		if err != nil {
			f = nil
		}
		writes <- write{i, f}
	}
	close(writes)
	failed := <-failedCh
	if len(failed) == 0 {
		return nil
	}
	again := make([]string, len(failed))
	for j, i := range failed {
		again[j] = keys[i]
	}
	if err := d.put(ctx, again, r); err != nil {
		return err
	}
	report(stored, failed)
	return nil
}

// report tells stored idx, markChunk at a time.
func report(stored func(idx []int), idx []int) {
	for stored != nil && len(idx) > 0 {
		n := min(len(idx), markChunk)
		stored(idx[:n:n])
		idx = idx[n:]
	}
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// put records keys with KV puts, Parallel at a time.
func (d *KVDelivered) put(ctx context.Context, keys []string, r Record) error {
	par := d.Parallel
	if par < 1 {
		par = 16
	}
	sem := make(chan struct{}, par)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Add(1)
		go func(k string) {
			defer func() { <-sem; wg.Done() }()
			if _, err := d.KV.Put(ctx, k, []byte(r)); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(k)
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("record %d of %d delivered ids: %w", len(errs), len(keys), errs[0])
	}
	return nil
}

// DeadLetterStream is the stream of undeliverable events.
const (
	DeadLetterStream = "DLQ"
	DeadLetterFilter = "dlq.>"
)

// Headers added to a dead letter (the original ce-* headers are kept, so a
// dead letter is still a valid event that can be replayed).
const (
	HeaderDLQReceiver = "Opswire-Dlq-Receiver"
	HeaderDLQRoute    = "Opswire-Dlq-Route"
	HeaderDLQReason   = "Opswire-Dlq-Reason"
	HeaderDLQError    = "Opswire-Dlq-Error"
	HeaderOrigSubject = "Opswire-Original-Subject"
	HeaderOrigSeq     = "Opswire-Original-Sequence"
)

// EnsureDeadLetterStream creates or updates the DLQ stream.
func EnsureDeadLetterStream(ctx context.Context, js jetstream.JetStream, maxAge time.Duration, replicas int) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: DeadLetterStream, Description: "opswire: events the notifier could not deliver",
		Subjects: []string{DeadLetterFilter}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
		MaxAge: maxAge, Discard: jetstream.DiscardOld, Duplicates: 10 * time.Minute, Replicas: replicas,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	return nil
}

// DeadLetterSubject is dlq.<cluster>.notifier.<receiver>.
func DeadLetterSubject(clusterToken, receiver string) string {
	return "dlq." + clusterToken + ".notifier." + receiver
}

// Publisher is the JetStream publish the dead-letter path needs.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// publishRetry stores msg, retrying with its Nats-Msg-Id until ctx ends.
// The caller must not treat the message as stored unless it returns nil.
func publishRetry(ctx context.Context, js Publisher, msg *nats.Msg) error {
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := js.PublishMsg(actx, msg)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", msg.Subject, err)
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// Outcome is published on notify.<cluster>.<receiver>.<outcome> (core NATS,
// not stored) after every final delivery result.
type Outcome struct {
	Receiver string `json:"receiver"`
	Route    string `json:"route"`
	// Cluster is the cluster of the events (one per outcome).
	Cluster  string    `json:"cluster,omitempty"`
	Outcome  string    `json:"outcome"` // delivered, failed, dropped
	Reason   string    `json:"reason,omitempty"`
	Code     int       `json:"code,omitempty"`
	Title    string    `json:"title,omitempty"`
	Attempts int       `json:"attempts,omitempty"`
	Events   int       `json:"events"`
	IDs      []string  `json:"ids"`
	Time     time.Time `json:"time"`
}

// Outcome names.
const (
	OutcomeDelivered = "delivered"
	OutcomeFailed    = "failed"
	OutcomeDropped   = "dropped"
)

// CorePublisher is the core NATS publish of outcomes.
type CorePublisher interface {
	Publish(subj string, data []byte) error
}

func publishOutcome(p CorePublisher, subj string, o Outcome) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return p.Publish(subj, b)
}

// KVRateLog keeps rate logs in the delivered-id bucket under "=rate.<budget>"
// ("=" cannot start a receiver name, so no record collides with it).
//
// A log holds each send's age at the save, not its time: the next active
// replica judges the ages by its own clock, so a clock ahead of the saver's
// does not make the sends older than they were (it would admit sends the
// receiver still counts against them). The time between the save and the
// load is not known and counts as none: the sends look younger than they
// are, which only waits longer.
type KVRateLog struct {
	KV jetstream.KeyValue
	// Now is the clock (default time.Now).
	Now func() time.Time

	// mu orders saves: the dispatchers of receivers sharing a budget save
	// it in the background, each with the times it took, and a save must
	// not replace a later one's.
	mu     sync.Mutex
	newest map[string]time.Time // per budget, the last send of the last save
}

// rateRecord is a saved rate log.
type rateRecord struct {
	Sends []rateEntry `json:"sends"`
}

// rateEntry is one send: its age at the save, in nanoseconds, and the
// limiter that admitted it (ratelimit.Limiter.Seed).
type rateEntry struct {
	Age int64  `json:"ageNs"`
	By  string `json:"by,omitempty"`
}

func rateKey(budget string) string { return "=rate." + budget }

func (l *KVRateLog) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// Save stores the sends with their ages. A log whose last send is older
// than that of one already saved is not stored.
func (l *KVRateLog) Save(ctx context.Context, budget string, sends []ratelimit.Sent) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var last time.Time
	for _, s := range sends {
		if s.At.After(last) {
			last = s.At
		}
	}
	if last.Before(l.newest[budget]) {
		return nil
	}
	now := l.now()
	rec := rateRecord{Sends: make([]rateEntry, len(sends))}
	for i, s := range sends {
		rec.Sends[i] = rateEntry{Age: max(0, int64(now.Sub(s.At))), By: s.By}
	}
	b, _ := json.Marshal(rec)
	if _, err := l.KV.Put(ctx, rateKey(budget), b); err != nil {
		return err
	}
	if l.newest == nil {
		l.newest = map[string]time.Time{}
	}
	l.newest[budget] = last
	return nil
}

// Load returns the stored sends of budget (none if there are none), each
// its saved age before now. A log of the older form (Unix nanoseconds, from
// a notifier before ages) is read as those times, admitted by no limiter
// of this process.
func (l *KVRateLog) Load(ctx context.Context, budget string) ([]ratelimit.Sent, error) {
	e, err := l.KV.Get(ctx, rateKey(budget))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if v := e.Value(); len(v) > 0 && v[0] == '[' {
		var ns []int64
		if err := json.Unmarshal(v, &ns); err != nil {
			return nil, err
		}
		out := make([]ratelimit.Sent, len(ns))
		for i, n := range ns {
			out[i] = ratelimit.Sent{At: time.Unix(0, n)}
		}
		return out, nil
	}
	var rec rateRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, err
	}
	now := l.now()
	out := make([]ratelimit.Sent, len(rec.Sends))
	for i, s := range rec.Sends {
		out[i] = ratelimit.Sent{At: now.Add(-time.Duration(max(0, s.Age))), By: s.By}
	}
	return out, nil
}

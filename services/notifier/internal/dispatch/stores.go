package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Delivered remembers which (route, receiver, event) triples were settled
// (delivered or dead-lettered), so a message redelivered after a crash
// between sending and acking is not sent twice, and a dead letter replayed
// after a fix is sent once.
type Delivered interface {
	State(ctx context.Context, key string) (Record, error)
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
	// Parallel bounds concurrent puts when marking a large batch.
	Parallel int
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

// Seen reports whether key has any record.
func (d *KVDelivered) Seen(ctx context.Context, key string) (bool, error) {
	r, err := d.State(ctx, key)
	return r != RecordNone, err
}

// Mark records keys, several at a time so a 500-event card is recorded in
// milliseconds (the window in which a crash could still cause a duplicate).
func (d *KVDelivered) Mark(ctx context.Context, keys []string, r Record) error {
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
type KVRateLog struct {
	KV jetstream.KeyValue
}

func rateKey(budget string) string { return "=rate." + budget }

// Save stores the times (Unix nanoseconds, JSON).
func (l *KVRateLog) Save(ctx context.Context, budget string, times []time.Time) error {
	ns := make([]int64, len(times))
	for i, t := range times {
		ns[i] = t.UnixNano()
	}
	b, _ := json.Marshal(ns)
	_, err := l.KV.Put(ctx, rateKey(budget), b)
	return err
}

// Load returns the stored times of budget (none if there are none).
func (l *KVRateLog) Load(ctx context.Context, budget string) ([]time.Time, error) {
	e, err := l.KV.Get(ctx, rateKey(budget))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ns []int64
	if err := json.Unmarshal(e.Value(), &ns); err != nil {
		return nil, err
	}
	out := make([]time.Time, len(ns))
	for i, n := range ns {
		out[i] = time.Unix(0, n)
	}
	return out, nil
}

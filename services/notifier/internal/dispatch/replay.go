package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/render"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/subject"
)

// DeadLetter is one stored dead letter.
type DeadLetter struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
}

// DeadLetters reads and removes a receiver's dead letters.
type DeadLetters interface {
	// Read returns the dead letters stored on subj, oldest first.
	Read(ctx context.Context, subj string) ([]DeadLetter, error)
	// Delete removes one dead letter after it was delivered.
	Delete(ctx context.Context, seq uint64) error
}

// StreamDeadLetters reads the DLQ stream.
type StreamDeadLetters struct {
	JS jetstream.JetStream
}

// Read fetches every message of subj present when it starts.
func (s StreamDeadLetters) Read(ctx context.Context, subj string) ([]DeadLetter, error) {
	st, err := s.JS.Stream(ctx, DeadLetterStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	want := info.State.Subjects[subj]
	if want == 0 {
		return nil, nil
	}
	oc, err := s.JS.OrderedConsumer(ctx, DeadLetterStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", DeadLetterStream, err)
	}
	var out []DeadLetter
	for uint64(len(out)) < want {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", DeadLetterStream, err)
		}
		n, last := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			out = append(out, DeadLetter{Seq: md.Sequence.Stream, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
			last = md.NumPending == 0
		}
		if batch.Error() != nil && !errors.Is(batch.Error(), nats.ErrTimeout) {
			return nil, fmt.Errorf("read %s: %w", DeadLetterStream, batch.Error())
		}
		if n == 0 || last {
			break // fewer than counted: some were deleted or expired meanwhile
		}
	}
	return out, nil
}

// Delete removes one message from the DLQ stream.
func (s StreamDeadLetters) Delete(ctx context.Context, seq uint64) error {
	st, err := s.JS.Stream(ctx, DeadLetterStream)
	if err != nil {
		return err
	}
	return st.DeleteMsg(ctx, seq)
}

// ReplayResult is the answer to one receiver's replay.
type ReplayResult struct {
	Receiver string `json:"receiver"`
	// Cluster whose dead letters were replayed (fleet notifier only).
	Cluster string `json:"cluster,omitempty"`
	// DeadLetters were read; Events are the distinct events among them.
	DeadLetters int `json:"deadLetters"`
	Events      int `json:"events"`
	// Delivered events were sent now in Cards cards; AlreadyDelivered had
	// been delivered before (their dead letters are only removed). Failed
	// events stay in the DLQ for the next replay.
	Delivered        int    `json:"delivered"`
	Cards            int    `json:"cards"`
	AlreadyDelivered int    `json:"alreadyDelivered"`
	Failed           int    `json:"failed"`
	Error            string `json:"error,omitempty"`
}

// replayAttempts bounds the attempts of one replayed card; what still fails
// stays in the DLQ.
const replayAttempts = 3

// replayMaxWait is the longest Retry-After a replay waits before a card's
// next attempt: its two waits then fit the request timeout the docs advise
// (`nats req --timeout 2m`) with room for the rate limit.
const replayMaxWait = 30 * time.Second

// replayWriteTimeout bounds the record writes, and separately the dead-letter
// deletes, of a replayed card the receiver accepted. They run even when the
// replay's context ended: the card is at the bot, and skipping them would
// make the next replay send it again.
const replayWriteTimeout = 30 * time.Second

// errReplayStopped fails the cards a replay did not start sending because its
// context ended (SIGTERM, lease lost); their dead letters stay for the next
// replay.
var errReplayStopped = errors.New("the notifier is stopping: not sent, left in the DLQ for the next replay")

// ReplayRunningError is the answer to a replay request for a receiver whose
// replay is still running.
func ReplayRunningError(receiver string) string {
	return "a replay of receiver " + receiver + " is already running; ask again once it has answered"
}

// waitTooLongError fails a replayed card whose receiver asked (Retry-After)
// for a longer wait than a replay waits (replayMaxWait): sooner would be
// refused again and count against the hook, and waiting would keep the
// replay's requester past its timeout.
type waitTooLongError struct {
	wait, limit time.Duration
	cause       error
}

func (e *waitTooLongError) Error() string {
	return fmt.Sprintf("%v; the receiver asks to wait %v (Retry-After), longer than a replay waits (%v): replay again later",
		e.cause, e.wait, e.limit)
}

func (e *waitTooLongError) Unwrap() error { return e.cause }

// Replay re-sends the dead letters of one of this dispatcher's receivers
// (after the cause was fixed), grouped per route and kind into cards as
// usual. An event is sent at most once: a dead letter whose event the
// delivered-id records call delivered is only removed, and a delivered
// card's events are recorded before their dead letters are removed. Those
// that fail again stay in the DLQ, untouched.
func (x *Dispatcher) Replay(ctx context.Context, dl DeadLetters, receiver string) ReplayResult {
	return x.ReplayCluster(ctx, dl, receiver, x.clusterTk)
}

// ReplayCluster is Replay of the dead letters of one cluster (its subject
// token): a fleet notifier keeps them per cluster, dlq.<cluster>.notifier.<receiver>.
//
// One replay of a receiver runs at a time, from reading its dead letters to
// removing those delivered: two that overlap would read the same dead letters,
// find no record yet, and both send them. A request while one runs is refused
// at once (ReplayRunningError) rather than queued: the operator learns the
// first still works (a `nats req` that timed out has not stopped it), and
// asking again afterwards finds only what it left.
//
// When ctx ends (SIGTERM), a card already at the receiver runs to its answer
// and, delivered, is recorded and its dead letters removed; no new attempt
// starts, and the cards left keep their dead letters.
func (x *Dispatcher) ReplayCluster(ctx context.Context, dl DeadLetters, receiver, cluster string) ReplayResult {
	res := ReplayResult{Receiver: receiver}
	if x.s.Fleet {
		res.Cluster = cluster
	}
	w := x.workers[receiver]
	if w == nil {
		res.Error = "unknown receiver"
		return res
	}
	if !w.replaying.CompareAndSwap(false, true) {
		res.Error = ReplayRunningError(receiver)
		return res
	}
	defer w.replaying.Store(false)
	rp := &replay{x: x, w: w, dl: dl, cluster: cluster, res: &res, log: x.d.Log.With().Str("receiver", receiver).Logger()}
	rp.run(ctx)
	rp.log.Info().Int("deadLetters", res.DeadLetters).Int("delivered", res.Delivered).Int("alreadyDelivered", res.AlreadyDelivered).
		Int("failed", res.Failed).Msg("dead letters replayed")
	return res
}

// replay is one run of ReplayCluster.
type replay struct {
	x       *Dispatcher
	w       *worker
	dl      DeadLetters
	cluster string
	res     *ReplayResult
	log     zerolog.Logger
	// stopped, once set, fails every card not sent yet without an attempt:
	// ctx ended, or the receiver asked for a longer wait than a replay waits.
	stopped error
}

// deadEvent is one event among the dead letters; an event dead-lettered
// more than once is sent once and all its dead letters removed.
type deadEvent struct {
	key   string // its delivered-id record
	route string
	item  *notify.Item
	seqs  []uint64
}

func (rp *replay) run(ctx context.Context) {
	if ctx.Err() != nil {
		rp.res.Error = errReplayStopped.Error()
		return
	}
	letters, err := rp.dl.Read(ctx, DeadLetterSubject(rp.cluster, rp.w.r.Name))
	if err != nil {
		rp.res.Error = err.Error()
		return
	}
	rp.res.DeadLetters = len(letters)
	evs := rp.events(letters)
	rp.res.Events = len(evs)
	groups, order := rp.undelivered(ctx, evs)
	now := rp.x.now()
	for _, g := range order {
		rp.sendGroup(ctx, g, groups[g], now)
	}
}

// events decodes the dead letters into distinct events, in the order of
// their first dead letter; one that cannot be decoded stays in the DLQ.
func (rp *replay) events(letters []DeadLetter) []*deadEvent {
	byKey := map[string]*deadEvent{}
	var out []*deadEvent
	for _, l := range letters {
		it, err := notify.Decode(l.Header.Get(HeaderOrigSubject), l.Header, l.Data)
		if err != nil {
			rp.log.Warn().Err(err).Uint64("seq", l.Seq).Msg("dead letter cannot be decoded; left in the DLQ")
			rp.res.Failed++
			continue
		}
		routeName := l.Header.Get(HeaderDLQRoute)
		key := DeliveredKey(rp.x.clusterOf(it), routeName, rp.w.r.Name, it.ID)
		e, ok := byKey[key]
		if !ok {
			e = &deadEvent{key: key, route: routeName, item: it}
			byKey[key] = e
			out = append(out, e)
		}
		e.seqs = append(e.seqs, l.Seq)
	}
	return out
}

// undelivered removes the dead letters of events recorded delivered and
// groups the others per route and kind (group keys in order), as the live
// path would.
func (rp *replay) undelivered(ctx context.Context, evs []*deadEvent) (map[string][]*deadEvent, []string) {
	groups := map[string][]*deadEvent{}
	var order []string
	for _, e := range evs {
		rec, err := rp.x.d.Delivered.State(ctx, e.key)
		if err != nil {
			rp.res.Error = "cannot read delivered records: " + err.Error()
			rp.res.Failed += len(e.seqs)
			continue
		}
		if rec == RecordDelivered {
			rp.res.AlreadyDelivered++
			rp.remove(ctx, e)
			continue
		}
		g := rp.x.groupKey(e.route, e.item)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], e)
	}
	sort.Strings(order)
	return groups, order
}

// sendGroup renders one group's events into cards and sends each.
func (rp *replay) sendGroup(ctx context.Context, g string, evs []*deadEvent, now time.Time) {
	x := rp.x
	r := x.d.Routes.ByName(evs[0].route)
	if r == nil {
		r = &config.Route{Name: evs[0].route}
	}
	items := make([]*notify.Item, len(evs))
	byItem := map[*notify.Item]*deadEvent{}
	for i, e := range evs {
		items[i] = e.item
		byItem[e.item] = e
	}
	gc := x.clusterOf(evs[0].item)
	for _, n := range render.Render(render.Group{Route: r.Name, Key: g, Title: r.Title, Cluster: gc, ClusterInTitle: x.s.Fleet, Now: now, Locale: rp.w.r.Locale}, items) {
		n.Receiver = rp.w.r.Name
		if err := rp.send(ctx, n); err != nil {
			rp.res.Failed += len(n.Items)
			rp.res.Error = err.Error()
			rp.log.Error().Err(err).Str("route", r.Name).Int("events", len(n.Items)).Msg("replayed dead letters not delivered; left in the DLQ")
			continue
		}
		rp.delivered(ctx, r.Name, gc, n, byItem)
	}
}

// send sends one card, unless the replay stopped; a context that ended or a
// receiver that asked for too long a wait stops it for the cards left.
func (rp *replay) send(ctx context.Context, n *notify.Notification) error {
	if rp.stopped == nil && ctx.Err() != nil {
		rp.stopped = errReplayStopped
	}
	if rp.stopped != nil {
		return rp.stopped
	}
	err := rp.w.sendOnce(ctx, n)
	var tooLong *waitTooLongError
	switch {
	case errors.As(err, &tooLong):
		rp.stopped = err
	case err != nil && ctx.Err() != nil:
		rp.stopped = errReplayStopped
	}
	return err
}

// delivered records a delivered card's events, then removes their dead
// letters (in that order: a crash in between leaves dead letters that the
// next replay only removes), and reports the card. Both run after ctx ended
// too: the receiver has the card.
func (rp *replay) delivered(ctx context.Context, route, cluster string, n *notify.Notification, byItem map[*notify.Item]*deadEvent) {
	x, name := rp.x, rp.w.r.Name
	keys := make([]string, len(n.Items))
	ids := make([]string, len(n.Items))
	for i, it := range n.Items {
		keys[i], ids[i] = DeliveredKey(cluster, route, name, it.ID), it.ID
	}
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayWriteTimeout)
	if err := x.d.Delivered.Mark(mctx, keys, RecordDelivered); err != nil {
		rp.log.Warn().Err(err).Msg("cannot record replayed events as delivered")
	}
	cancel()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayWriteTimeout)
	for _, it := range n.Items {
		rp.remove(dctx, byItem[it])
	}
	cancel()
	rp.res.Delivered += len(n.Items)
	rp.res.Cards++
	x.d.Metrics.Deliveries.WithLabelValues(name, OutcomeDelivered).Inc()
	x.d.Metrics.Events.WithLabelValues(name, OutcomeDelivered).Add(float64(len(ids)))
	_ = publishOutcome(x.d.Core, subject.Notify(cluster, name, OutcomeDelivered), Outcome{Receiver: name, Route: route, Cluster: cluster,
		Outcome: OutcomeDelivered, Reason: "replayed", Title: n.Title, Events: len(ids), IDs: ids, Time: x.now()})
}

// remove deletes an event's dead letters; a failure is only logged: the
// event is recorded delivered, so the next replay removes them.
func (rp *replay) remove(ctx context.Context, e *deadEvent) {
	for _, seq := range e.seqs {
		if err := rp.dl.Delete(ctx, seq); err != nil {
			rp.log.Warn().Err(err).Uint64("seq", seq).Msg("cannot remove a replayed dead letter; a later replay skips it as delivered")
		}
	}
}

// sendOnce delivers one replayed card with a few attempts under the
// receiver's rate limit (shared with the live path). Like the live path, it
// never cuts an attempt under way when ctx ends (the bot may have the card
// already, and a card counted failed is sent again by the next replay) and
// starts none after. Between attempts it waits replayWait.
func (w *worker) sendOnce(ctx context.Context, n *notify.Notification) error {
	backoff := w.x.s.RetryInitial
	for attempt := 1; ; attempt++ {
		if err := w.r.Limiter.Wait(ctx); err != nil || ctx.Err() != nil {
			// Wait admits at once, even after ctx ended, while the budget lasts.
			return errReplayStopped
		}
		retryable, err := w.replayAttempt(ctx, n)
		if err == nil || !retryable || attempt == replayAttempts {
			return err
		}
		wait, err := w.replayWait(backoff, err)
		if err != nil {
			return err
		}
		if sleepCtx(ctx, wait) != nil {
			return errReplayStopped
		}
		backoff = min(2*backoff, w.x.s.RetryMax)
	}
}

// replayAttempt is one attempt of a replayed card, bounded by the receiver's
// timeout, not by ctx (sendOnce).
func (w *worker) replayAttempt(ctx context.Context, n *notify.Notification) (bool, error) {
	w.x.saveRate(w.r)
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.r.Timeout)
	retryable, err := w.r.Sink.Send(actx, n)
	cancel()
	switch reason := notify.ReasonOf(err); {
	case err == nil:
		w.x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "ok", "").Inc()
	case !retryable:
		w.x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "permanent", string(reason)).Inc()
	default:
		w.x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "retryable", string(reason)).Inc()
	}
	return retryable, err
}

// replayWait is the wait after a retryable failure (err): the backoff, or
// the receiver's Retry-After when longer (sooner would be refused again), as
// on the live path. A Retry-After beyond replayMaxWait fails the card now
// with a waitTooLongError.
func (w *worker) replayWait(backoff time.Duration, err error) (time.Duration, error) {
	ra := notify.RetryAfterOf(err)
	if ra > replayMaxWait {
		return 0, &waitTooLongError{wait: ra, limit: replayMaxWait, cause: err}
	}
	return max(backoff, ra), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

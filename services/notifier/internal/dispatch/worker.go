package dispatch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/notify"
)

// batch is one notification to one receiver and the messages it settles.
type batch struct {
	n       *notify.Notification
	route   string
	cluster string // of every entry: groups never mix clusters
	entries []*pending
}

// worker delivers one receiver's batches in order, one at a time: the
// receiver's rate limit then paces everything, and a receiver that is down
// holds only its own queue, never another receiver's.
type worker struct {
	x      *Dispatcher
	r      Receiver
	mu     sync.Mutex
	queue  []*batch
	signal chan struct{}
	// replaying is set while a replay of the receiver runs (ReplayCluster):
	// one at a time.
	replaying atomic.Bool
}

func newWorker(x *Dispatcher, r Receiver) *worker {
	return &worker{x: x, r: r, signal: make(chan struct{}, 1)}
}

func (w *worker) enqueue(b *batch) {
	w.mu.Lock()
	w.queue = append(w.queue, b)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *worker) next() *batch {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		return nil
	}
	b := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	return b
}

func (w *worker) run(ctx context.Context) {
	for {
		b := w.next()
		if b == nil {
			select {
			case <-ctx.Done():
				return
			case <-w.signal:
				continue
			}
		}
		if !w.deliver(ctx, b) {
			return // shutting down; held messages are nak'ed by the dispatcher
		}
	}
}

// deliver runs the one retry loop of a batch, bounded by GiveUpAfter
// (counted from the batch's first attempt) and ctx. It returns false only
// when ctx ended before the batch was settled. An attempt already under way
// when ctx ends is not cut: it runs to its answer or its own timeout, and a
// delivered card is then recorded and acknowledged, so a SIGTERM mid-POST
// does not make the next replica send the card again.
func (w *worker) deliver(ctx context.Context, b *batch) bool {
	x, log := w.x, w.x.d.Log.With().Str("receiver", w.r.Name).Str("route", b.route).Logger()
	var start time.Time
	backoff := x.s.RetryInitial
	attempts := 0
	var lastErr error
	for {
		if !w.waitUnpaused(ctx) {
			return false
		}
		waitStart := time.Now()
		err := w.r.Limiter.Wait(ctx)
		x.d.Metrics.RateLimitWait.WithLabelValues(w.r.Name).Add(time.Since(waitStart).Seconds())
		if err != nil {
			return false
		}
		x.saveRate(w.r)
		attempts++
		if attempts == 1 {
			start = x.now()
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.r.Timeout)
		t0 := time.Now()
		retryable, err := w.r.Sink.Send(actx, b.n)
		cancel()
		x.d.Metrics.SendDuration.WithLabelValues(w.r.Name).Observe(time.Since(t0).Seconds())
		if err == nil {
			x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "ok", "").Inc()
			w.succeeded(ctx, b, attempts)
			return true
		}
		reason := notify.ReasonOf(err)
		if !retryable {
			x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "permanent", string(reason)).Inc()
			log.Error().Err(err).Str("reason", string(reason)).Int("events", len(b.entries)).Int("attempts", attempts).
				Msg("receiver rejected the notification permanently; dead-lettering")
			w.failed(ctx, b, string(reason), err, attempts)
			return true
		}
		x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "retryable", string(reason)).Inc()
		if ctx.Err() != nil {
			return false // shutting down: the messages are released for another replica
		}
		if x.now().Sub(start) >= x.s.GiveUpAfter {
			log.Error().Err(err).Str("reason", string(reason)).Int("events", len(b.entries)).Int("attempts", attempts).
				Dur("after", x.now().Sub(start)).Msg("receiver kept failing; giving up and dead-lettering")
			w.failed(ctx, b, "gave_up_"+string(reason), err, attempts)
			return true
		}
		// Log when the failure changes, not on every retry.
		if lastErr == nil || lastErr.Error() != err.Error() {
			log.Warn().Err(err).Str("reason", string(reason)).Dur("retryIn", backoff).Msg("send failed; retrying")
		}
		lastErr = err
		wait := backoff
		if ra := notify.RetryAfterOf(err); ra > wait {
			wait = min(ra, x.s.GiveUpAfter) // the receiver said when; sooner would be refused again
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff *= 2
		if backoff > x.s.RetryMax {
			backoff = x.s.RetryMax
		}
	}
}

// waitUnpaused holds the batch while a pause record holds the notifier:
// nothing is sent, and its messages stay held (kept alive by progress
// acks, never acked), so they are sent once the pause ends, not lost. It
// looks again every second, so a resume takes effect within one. False
// when ctx ended first.
func (w *worker) waitUnpaused(ctx context.Context) bool {
	x := w.x
	logged := false
	for {
		if ctx.Err() != nil {
			return false
		}
		if x.d.Pause == nil {
			return true
		}
		p, ok := x.d.Pause.Paused()
		if !ok {
			if logged {
				x.d.Log.Info().Str("receiver", w.r.Name).Msg("pause over: sending the held notifications")
			}
			return true
		}
		if !logged {
			logged = true
			x.d.Log.Warn().Str("receiver", w.r.Name).Str("pause", p.String()).Msg("notifications held: paused")
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (w *worker) keys(b *batch) ([]string, []string) {
	keys := make([]string, len(b.entries))
	ids := make([]string, len(b.entries))
	for i, p := range b.entries {
		keys[i] = DeliveredKey(b.cluster, b.route, w.r.Name, p.item.ID)
		ids[i] = p.item.ID
	}
	return keys, ids
}

// eachMarker is a Delivered that reports records as they are stored
// (KVDelivered.MarkEach), so a large card's messages are acked while the
// rest of its records are written: each message still only after its own
// record.
type eachMarker interface {
	MarkEach(ctx context.Context, keys []string, r Record, stored func(idx []int)) error
}

func (w *worker) succeeded(ctx context.Context, b *batch, attempts int) {
	x := w.x
	keys, ids := w.keys(b)
	// Record before acking: a crash after this point redelivers messages
	// that are then skipped for this receiver.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	t0 := time.Now()
	acked := make([]bool, len(b.entries))
	var err error
	if em, ok := x.d.Delivered.(eachMarker); ok {
		err = em.MarkEach(mctx, keys, RecordDelivered, func(idx []int) {
			entries := make([]*pending, len(idx))
			for j, i := range idx {
				entries[j], acked[i] = b.entries[i], true
			}
			x.settle(entries)
		})
	} else {
		err = x.d.Delivered.Mark(mctx, keys, RecordDelivered)
	}
	if err != nil {
		x.d.Log.Warn().Err(err).Str("receiver", w.r.Name).Msg("cannot record delivered ids; a redelivery could repeat this card")
	}
	marked := time.Since(t0)
	cancel()
	x.report(Outcome{Receiver: w.r.Name, Route: b.route, Cluster: b.cluster,
		Outcome: OutcomeDelivered, Title: b.n.Title, Attempts: attempts, Events: len(ids), IDs: ids, Time: x.now()})
	t1 := time.Now()
	var rest []*pending // not acked with their records (none were confirmed stored)
	for i, p := range b.entries {
		if !acked[i] {
			rest = append(rest, p)
		}
	}
	x.settle(rest)
	x.d.Log.Debug().Str("receiver", w.r.Name).Str("route", b.route).Int("events", len(ids)).Int("attempts", attempts).
		Int("ackedWithRecords", len(b.entries)-len(rest)).Dur("recordMs", marked).Dur("ackMs", time.Since(t1)).Msg("delivered")
}

func (w *worker) failed(ctx context.Context, b *batch, reason string, cause error, attempts int) {
	x := w.x
	for _, p := range b.entries {
		if err := x.deadLetter(ctx, b.route, w.r.Name, p, reason, cause); err != nil {
			// Not stored: recording or acking now would lose the events.
			x.deadLetterFailed(w.r.Name, len(b.entries), err)
			x.release(b.entries)
			return
		}
	}
	keys, ids := w.keys(b)
	// Dead-lettered counts as settled: a redelivery must not start the
	// retries (and the error logs) over again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	if err := x.d.Delivered.Mark(mctx, keys, RecordDeadLettered); err != nil {
		x.d.Log.Warn().Err(err).Str("receiver", w.r.Name).Msg("cannot record dead-lettered ids")
	}
	cancel()
	code := 0
	var se *notify.SendError
	if errors.As(cause, &se) {
		code = se.Code
	}
	x.report(Outcome{Receiver: w.r.Name, Route: b.route, Cluster: b.cluster,
		Outcome: OutcomeFailed, Reason: reason, Code: code, Title: b.n.Title, Attempts: attempts, Events: len(ids), IDs: ids, Time: x.now()})
	x.settle(b.entries)
}

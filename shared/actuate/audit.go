package actuate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/natsx"
)

// Defaults of the Auditor.
const (
	DefaultPublishAttempt = 5 * time.Second
	maxBackoff            = 2 * time.Second
	// outageReport is how often a publish outage is logged again while it lasts.
	outageReport = 30 * time.Second
)

// Auditor stores the OPS audit messages of an actor, in order, in the
// background: Publish only queues, so an OPS outage never blocks actions on
// other objects, and no audit of a write that happened is abandoned. Each
// message is retried with the same Nats-Msg-Id until the stream acknowledges
// it; a retry of an attempt that was stored after all is dropped by the
// stream as a duplicate (within its duplicate window).
//
// The connection must not buffer while disconnected (app.NATS sets
// ReconnectBufSize -1 for actors): a buffered copy would reach the stream
// unseen at reconnect, and a later attempt outside the duplicate window would
// store the message twice.
//
// The backlog is in memory: it survives a NATS outage of any length, not the
// death of the process (Close flushes it for a grace period and counts what
// is left as dropped). It is bounded by what the actor may do while NATS is
// away: the rate window bounds actions, the announce-once set bounds the rest.
type Auditor struct {
	pub     natsx.Publisher
	attempt time.Duration
	m       *Metrics
	log     zerolog.Logger
	// dupWindow is OPS's duplicate window (nats.duplicates); 0: unknown,
	// no message is checked before it is stored (lateCheck).
	dupWindow time.Duration

	ctx    context.Context // cancelled by Close after the grace period
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{}

	mu     sync.Mutex
	queue  []audit // oldest first; queue[0] is being published
	closed bool
}

type audit struct {
	subject string
	ev      envelope.Event
	queued  time.Time
}

// AuditorOption configures an Auditor.
type AuditorOption func(*Auditor)

// WithDuplicateWindow tells the Auditor OPS's duplicate window. A message
// still queued when half of it has passed (a replica partitioned from NATS,
// or deposed, after a write) is looked up in OPS before it is stored: the
// next leader may have completed the same outcome from its intent, and the
// stream, past its window, would store this copy a second time.
func WithDuplicateWindow(d time.Duration) AuditorOption {
	return func(a *Auditor) { a.dupWindow = d }
}

// NewAuditor starts the publisher; attempt bounds one publish attempt
// (DefaultPublishAttempt when not positive). Call Close when the process stops.
func NewAuditor(pub natsx.Publisher, attempt time.Duration, m *Metrics, log zerolog.Logger, opts ...AuditorOption) *Auditor {
	if attempt <= 0 {
		attempt = DefaultPublishAttempt
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Auditor{pub: pub, attempt: attempt, m: m, log: log, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1)}
	for _, o := range opts {
		o(a)
	}
	go a.run()
	return a
}

// Publish queues ev for subject and returns at once.
func (a *Auditor) Publish(subject string, ev envelope.Event) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		a.m.AuditDropped.Inc()
		a.log.Error().Str("id", ev.ID).Str("subject", subject).Msg("audit message after shutdown: not stored in OPS")
		return
	}
	a.queue = append(a.queue, audit{subject: subject, ev: ev, queued: time.Now()})
	a.m.AuditBacklog.Set(float64(len(a.queue)))
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Backlog is the number of messages not stored yet.
func (a *Auditor) Backlog() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}

// Close stops taking messages, keeps publishing the backlog for up to grace,
// then gives up on the rest (logged and counted as dropped).
func (a *Auditor) Close(grace time.Duration) {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
		a.cancel()
		<-a.done
	}
	a.cancel()
	a.mu.Lock()
	left := len(a.queue)
	a.queue = nil
	a.mu.Unlock()
	a.m.AuditBacklog.Set(0)
	if left > 0 {
		a.m.AuditDropped.Add(float64(left))
		a.log.Error().Int("messages", left).Dur("grace", grace).
			Msg("audit messages still unstored at shutdown: given up (the actions happened; their Kubernetes Events remain)")
	}
}

func (a *Auditor) run() {
	defer close(a.done)
	for {
		next, ok := a.head()
		if !ok {
			return
		}
		a.store(next)
	}
}

// head waits for the oldest queued message; false when closed and empty, or
// when the grace period ended.
func (a *Auditor) head() (audit, bool) {
	for {
		if a.ctx.Err() != nil {
			return audit{}, false
		}
		a.mu.Lock()
		if len(a.queue) > 0 {
			h := a.queue[0]
			a.mu.Unlock()
			return h, true
		}
		closed := a.closed
		a.mu.Unlock()
		if closed {
			return audit{}, false
		}
		select {
		case <-a.wake:
		case <-a.ctx.Done():
			return audit{}, false
		}
	}
}

// store publishes one message until it is stored, a permanent error, or the
// end of the grace period, and then removes it from the queue.
func (a *Auditor) store(m audit) {
	backoff := 100 * time.Millisecond
	var failingSince, lastReport time.Time
	msgID, round := m.ev.ID, 0
	for attempts := 1; ; attempts++ {
		stored, err := a.lateCheck(m)
		if stored {
			a.m.AuditLateFound.Inc()
			a.log.Info().Str("id", m.ev.ID).Str("subject", m.subject).Dur("queued", time.Since(m.queued)).
				Msg("audit message queued past half the duplicate window is in OPS already (the next leader completed it): not stored again")
			break
		}
		var ack *jetstream.PubAck
		if err == nil {
			actx, cancel := context.WithTimeout(a.ctx, a.attempt)
			ack, err = a.pub.PublishMsg(actx, natsx.EventMsg(m.ev, m.subject, msgID))
			cancel()
		}
		if err == nil && ack != nil && ack.Duplicate {
			// Held by a foreign message (another actor's subject), or
			// by one removed from OPS? Then store it under a fallback id
			// (docs/security.md). A holder that cannot be read back
			// within one attempt timeout stands (UnverifiedStands,
			// counted and logged by natsx): an audit id is one per
			// occurrence, republished only by this actor's retry or its
			// next leader, so the holder is almost surely this audit;
			// a fallback copy would store it twice, and waiting for the
			// read-back (a.ctx lives until Close) would hold every later
			// audit behind it while the publishes themselves go through.
			var next string
			next, err = natsx.CheckDuplicateWith(a.ctx, a.pub, ack, m.subject, m.ev, msgID, round, a.attempt, natsx.UnverifiedStands)
			if err != nil && a.ctx.Err() != nil {
				return // still reading the holder back at shutdown: Close counts what is left
			}
			if err != nil {
				a.m.AuditDropped.Inc()
				a.log.Error().Err(err).Str("id", m.ev.ID).Str("subject", m.subject).Msg("audit message cannot be stored in OPS: dropped")
				break
			}
			if next != "" {
				msgID, round = next, round+1
				continue
			}
		}
		if err == nil {
			a.m.AuditStored.Inc()
			if !failingSince.IsZero() {
				a.log.Info().Str("id", m.ev.ID).Int("attempts", attempts).Dur("after", time.Since(failingSince)).
					Int("backlog", a.Backlog()-1).Msg("OPS reachable again: audit message stored; publishing the backlog")
			}
			break
		}
		if natsx.Permanent(err) {
			a.m.AuditDropped.Inc()
			a.log.Error().Err(err).Str("id", m.ev.ID).Str("subject", m.subject).Msg("audit message cannot be stored in OPS: dropped")
			break
		}
		a.m.AuditRetries.Inc()
		now := time.Now()
		if failingSince.IsZero() {
			failingSince, lastReport = now, now
			a.log.Warn().Err(err).Str("id", m.ev.ID).Int("backlog", a.Backlog()).
				Msg("OPS publish failing: audit messages are kept and retried until stored; actions go on")
		} else if now.Sub(lastReport) >= outageReport {
			lastReport = now
			a.log.Warn().Err(err).Str("id", m.ev.ID).Int("backlog", a.Backlog()).Dur("for", now.Sub(failingSince)).
				Msg("OPS publish still failing: audit backlog waiting")
		}
		select {
		case <-a.ctx.Done():
			return // Close counts what is left
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
	a.mu.Lock()
	a.queue = a.queue[1:]
	a.m.AuditBacklog.Set(float64(len(a.queue)))
	a.mu.Unlock()
}

// lateCheck reports whether m, queued for half the duplicate window or more,
// is stored in OPS already under its id: the stream's duplicate window no
// longer guards its next publish. Messages on m's subject from a minute
// before it was queued on are read (a direct get, what the actors may make).
// An error (OPS unreadable) is retried like a failed publish.
func (a *Auditor) lateCheck(m audit) (bool, error) {
	js, ok := a.pub.(jetstream.JetStream)
	if !ok || a.dupWindow <= 0 || time.Since(m.queued) < a.dupWindow/2 {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(a.ctx, a.attempt)
	defer cancel()
	msgs, err := readOPS(ctx, js, m.subject, m.queued.Add(-time.Minute))
	if err != nil {
		return false, fmt.Errorf("look up a late audit message in OPS: %w", err)
	}
	for _, msg := range msgs {
		if msg.Header.Get(envelope.HeaderID) == m.ev.ID || msg.Header.Get(envelope.HeaderMsgID) == m.ev.ID {
			return true, nil
		}
	}
	return false, nil
}

// Audit is what an actuator needs of the Auditor: queue a message, never
// wait, never fail. Tests pass a synchronous recorder.
type Audit interface {
	Publish(subject string, ev envelope.Event)
}

var _ Audit = (*Auditor)(nil)

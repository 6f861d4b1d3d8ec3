package natsx

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/envelope"
)

// Publisher is the part of jetstream.JetStream that services publish with.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// storedReader is the part of jetstream.JetStream that reads a stored message
// back (a direct get by sequence when the stream allows direct gets, as OPS
// does; the actors may make those, docs/security.md).
type storedReader interface {
	Stream(ctx context.Context, name string) (jetstream.Stream, error)
}

// Suppressed counts publishes that the stream dropped as duplicates of a
// message that is not this one (result "foreign": another subject or another
// ce-id holds the Nats-Msg-Id; "unverified": the stored message could not be
// read back). Each was published again under a fallback Nats-Msg-Id, so the
// record is stored. Registered by shared/app as opswire_publish_suppressed_total.
var Suppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "opswire_publish_suppressed_total",
	Help: "Publishes dropped by the stream as duplicates of another message holding their Nats-Msg-Id (foreign: another subject or event; unverified: unreadable), each republished under a fallback id.",
}, []string{"result"})

var publishLog atomic.Pointer[zerolog.Logger]

// SetPublishLog sets the logger PublishEvent reports suppressed publishes to
// (shared/app sets the service's; default: none).
func SetPublishLog(l zerolog.Logger) { publishLog.Store(&l) }

func plog() *zerolog.Logger {
	if l := publishLog.Load(); l != nil {
		return l
	}
	nop := zerolog.Nop()
	return &nop
}

// maxFallbacks bounds the republishes of one event: the first fallback id is
// deterministic (ce-id + "@" + subject: a retry after a lost ack, or the
// next leader, is still deduplicated), the later ones carry a random suffix
// nobody can publish ahead of time.
const maxFallbacks = 2

// PublishEvent stores one event, retrying with the same Nats-Msg-Id until it is
// acknowledged or ctx ends. A timed-out publish may have been stored; retrying
// with the same id lets the server drop the duplicate.
//
// The stream deduplicates by Nats-Msg-Id across all its subjects, and ids are
// deterministic (derived from KUBE), so another user allowed on the stream
// could publish one first, on its own subject, and the stream would drop
// ours. On a duplicate ack PublishEvent therefore reads the stored message
// back (at ack.Sequence; needs a js that is a jetstream.JetStream) and accepts
// the duplicate only if it is this event on this subject (a retry of ours, or
// another replica of the same actor). Otherwise it counts and logs the
// suppression and publishes again with a fallback Nats-Msg-Id; ce-id stays
// the event's id (consumers deduplicate by ce-id).
func PublishEvent(ctx context.Context, js Publisher, subj string, ev envelope.Event, attemptTimeout time.Duration, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	msgID := ev.ID
	for round := 0; ; round++ {
		ack, err := publishRetry(ctx, js, subj, ev, msgID, attemptTimeout, opts...)
		if err != nil || !ack.Duplicate {
			return ack, err
		}
		next, err := CheckDuplicate(ctx, js, ack, subj, ev, msgID, round, attemptTimeout)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return ack, nil
		}
		msgID = next
	}
}

// EventMsg is ev.Msg(subj) published under msgID (ev.ID, or the fallback
// CheckDuplicate returned).
func EventMsg(ev envelope.Event, subj, msgID string) *nats.Msg {
	m := ev.Msg(subj)
	m.Header.Set(envelope.HeaderMsgID, msgID)
	return m
}

// CheckDuplicate decides on a duplicate ack of ev published on subj under
// msgID (round: how many fallbacks came before). It returns "" if the
// message holding msgID is ev itself on subj (a retry of ours, or another
// replica of the same actor: the ack stands), else it counts and logs the
// suppression and returns the Nats-Msg-Id to publish under next, or an
// error once maxFallbacks ids were all held.
func CheckDuplicate(ctx context.Context, js Publisher, ack *jetstream.PubAck, subj string, ev envelope.Event, msgID string, round int, timeout time.Duration) (string, error) {
	result, stored, verr := checkDuplicate(ctx, js, ack, subj, ev.ID, timeout)
	if result == "" {
		return "", nil
	}
	Suppressed.WithLabelValues(result).Inc()
	l := plog()
	if round >= maxFallbacks {
		l.Error().Str("id", ev.ID).Str("msg_id", msgID).Str("subject", subj).Str("held_by", stored).
			Msg("publish suppressed by a foreign message again: given up")
		return "", fmt.Errorf("publish %s: Nats-Msg-Id %q held by a foreign message (%s)", subj, msgID, stored)
	}
	next := ev.ID + "@" + subj
	if round > 0 {
		next += "/" + nuid.Next()
	}
	l.Warn().Err(verr).Str("id", ev.ID).Str("msg_id", msgID).Str("subject", subj).Str("held_by", stored).
		Uint64("seq", ack.Sequence).Str("result", result).Str("fallback_msg_id", next).
		Msg("publish suppressed by a message holding its Nats-Msg-Id: republishing under a fallback id")
	return next, nil
}

// checkDuplicate reads the message a duplicate ack points at. It returns ""
// if it is ev itself on subj, else "foreign" or "unverified" and what holds
// the id (its subject and ce-id).
func checkDuplicate(ctx context.Context, js Publisher, ack *jetstream.PubAck, subj, id string, timeout time.Duration) (string, string, error) {
	r, ok := js.(storedReader)
	if !ok {
		return "unverified", "", errors.New("publisher cannot read the stream")
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := r.Stream(rctx, ack.Stream)
	if err != nil {
		return "unverified", "", err
	}
	m, err := s.GetMsg(rctx, ack.Sequence)
	if err != nil {
		return "unverified", "", err
	}
	storedID := m.Header.Get(envelope.HeaderID)
	if m.Subject == subj && storedID == id {
		return "", "", nil
	}
	return "foreign", m.Subject + " " + storedID, nil
}

func publishRetry(ctx context.Context, js Publisher, subj string, ev envelope.Event, msgID string, attemptTimeout time.Duration, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	backoff := 100 * time.Millisecond
	for {
		msg := EventMsg(ev, subj, msgID)
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		ack, err := js.PublishMsg(actx, msg, opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if Permanent(err) {
			return nil, fmt.Errorf("publish %s: %w", subj, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("publish %s: %w (last error: %v)", subj, ctx.Err(), err)
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// Permanent reports publish errors that no retry can fix.
func Permanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 10166: per-message TTL disabled; 10054: message size exceeds maximum;
		// 10060: expected stream does not match.
		switch apiErr.ErrorCode {
		case 10166, 10054, 10060:
			return true
		}
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrConnectionClosed)
}

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

// Suppressed counts duplicate acks whose holder is not proven to be the
// event itself. "foreign": another subject or another ce-id holds the
// Nats-Msg-Id; the event was published again under a fallback Nats-Msg-Id, so
// it is stored. "gone": the holder was removed from the stream (discarded
// by its limits, deleted) inside the duplicate window, so nothing holds the
// id; the event was published again under the fallback id, as for "foreign"
// (the stream holds no copy it could duplicate). "unverified": the holder
// could not be read back before the
// publish gave up reading; nothing was republished (the holder is most likely
// the event itself, and a fallback id would store it twice): the publish
// failed, or with UnverifiedStands its duplicate ack stood. Registered by
// shared/app as opswire_publish_suppressed_total.
var Suppressed = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "opswire_publish_suppressed_total",
	Help: "Duplicate acks not proven to be the event itself (foreign: another subject or event holds the Nats-Msg-Id; gone: the holder was removed from the stream; both republished under a fallback id; unverified: the holder could not be read back, not republished).",
}, []string{"result"})

// Unverified is what PublishEvent does with a duplicate ack whose holder
// cannot be read back (a JetStream API request failing while publishes go
// through).
type Unverified int

const (
	// UnverifiedFails retries the read-back until the publish's context
	// ends and then fails the publish: the caller's own retry, or its
	// "not stored" path, decides (intents).
	UnverifiedFails Unverified = iota
	// UnverifiedStands retries the read-back for one attempt timeout and
	// then lets the duplicate ack stand: for events whose id is one per
	// occurrence (a report tick, an image alert, an audit), where the holder is
	// almost surely an earlier run's copy and a second copy would be
	// delivered twice.
	UnverifiedStands
)

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
	return PublishEventWith(ctx, js, subj, ev, attemptTimeout, UnverifiedFails, opts...)
}

// PublishEventWith is PublishEvent with the given treatment of a duplicate
// ack whose holder cannot be read back.
func PublishEventWith(ctx context.Context, js Publisher, subj string, ev envelope.Event, attemptTimeout time.Duration, unverified Unverified, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	msgID := ev.ID
	for round := 0; ; round++ {
		ack, err := publishRetry(ctx, js, subj, ev, msgID, attemptTimeout, opts...)
		if err != nil || !ack.Duplicate {
			return ack, err
		}
		next, err := checkDuplicateWith(ctx, js, ack, subj, ev, msgID, round, attemptTimeout, unverified)
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
// replica of the same actor: the ack stands). If a foreign message holds it,
// or the holder is gone from the stream (nothing holds the id, so a fallback
// id cannot store a second copy), it counts and logs the suppression and
// returns the Nats-Msg-Id to publish under next, or an error once maxFallbacks ids were all held. If the holder
// cannot be read back it retries the read until ctx ends and then returns an
// error (UnverifiedFails).
func CheckDuplicate(ctx context.Context, js Publisher, ack *jetstream.PubAck, subj string, ev envelope.Event, msgID string, round int, timeout time.Duration) (string, error) {
	return checkDuplicateWith(ctx, js, ack, subj, ev, msgID, round, timeout, UnverifiedFails)
}

// CheckDuplicateWith is CheckDuplicate with the given treatment of an
// unreadable holder (the Auditor's audits stand: UnverifiedStands).
func CheckDuplicateWith(ctx context.Context, js Publisher, ack *jetstream.PubAck, subj string, ev envelope.Event, msgID string, round int, timeout time.Duration, unverified Unverified) (string, error) {
	return checkDuplicateWith(ctx, js, ack, subj, ev, msgID, round, timeout, unverified)
}

// checkDuplicateWith is CheckDuplicate with the given treatment of an
// unreadable holder. Only a holder proven foreign, or proven gone, earns a
// fallback id: an unreadable one is most likely the event itself (the usual reason for a
// duplicate ack), and a fallback id would store it a second time.
func checkDuplicateWith(ctx context.Context, js Publisher, ack *jetstream.PubAck, subj string, ev envelope.Event, msgID string, round int, timeout time.Duration, unverified Unverified) (string, error) {
	rctx := ctx
	if unverified == UnverifiedStands {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	result, stored, verr := readBack(rctx, js, ack, subj, ev.ID, timeout)
	l := plog()
	switch result {
	case "":
		return "", nil
	case "unverified":
		Suppressed.WithLabelValues(result).Inc()
		w := l.Warn().Err(verr).Str("id", ev.ID).Str("msg_id", msgID).Str("subject", subj).Uint64("seq", ack.Sequence)
		if unverified == UnverifiedStands && ctx.Err() == nil {
			w.Msg("duplicate ack whose holder cannot be read back: it stands (most likely this event stored before)")
			return "", nil
		}
		w.Msg("duplicate ack whose holder cannot be read back: not republished, the publish fails")
		return "", fmt.Errorf("publish %s: Nats-Msg-Id %q held by a message that cannot be read back (seq %d): %w", subj, msgID, ack.Sequence, verr)
	}
	Suppressed.WithLabelValues(result).Inc()
	if round >= maxFallbacks {
		l.Error().Str("id", ev.ID).Str("msg_id", msgID).Str("subject", subj).Str("held_by", stored).
			Msg("publish suppressed by a foreign message again: given up")
		return "", fmt.Errorf("publish %s: Nats-Msg-Id %q held by a foreign message (%s)", subj, msgID, stored)
	}
	next := ev.ID + "@" + subj
	if round > 0 {
		next += "/" + nuid.Next()
	}
	msg := "publish suppressed by a foreign message holding its Nats-Msg-Id: republishing under a fallback id"
	if result == "gone" {
		msg = "duplicate ack whose holder was removed from the stream: republishing under a fallback id"
	}
	l.Warn().Str("id", ev.ID).Str("msg_id", msgID).Str("subject", subj).Str("held_by", stored).
		Uint64("seq", ack.Sequence).Str("result", result).Str("fallback_msg_id", next).
		Msg(msg)
	return next, nil
}

// readBack reads the message a duplicate ack points at, retrying a failed
// read (with backoff) until ctx ends: a JetStream API hiccup must not pass
// for a foreign holder. It returns "" if the holder is the event id itself on
// subj, "foreign" and what holds the id (its subject and ce-id), "gone" if
// the stream's leader confirms the holder was removed, or "unverified" and
// the last read error.
func readBack(ctx context.Context, js Publisher, ack *jetstream.PubAck, subj, id string, timeout time.Duration) (string, string, error) {
	r, ok := js.(storedReader)
	if !ok {
		return "unverified", "", errors.New("publisher cannot read the stream")
	}
	backoff := 100 * time.Millisecond
	for {
		m, err := getStored(ctx, r, ack, timeout)
		if err == nil {
			storedID := m.Header.Get(envelope.HeaderID)
			if m.Subject == subj && storedID == id {
				return "", "", nil
			}
			return "foreign", m.Subject + " " + storedID, nil
		}
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Removed (discarded by the stream's limits, deleted, purged)
			// inside the duplicate window: nothing holds the id in the
			// stream, so a fallback id cannot store a second copy. But a
			// direct get may be answered by a replica still catching up,
			// which does not have the message yet: only the stream
			// leader's state proves it gone; otherwise read again.
			gone, gerr := removed(ctx, r, ack, timeout)
			if gone {
				return "gone", "removed from the stream", nil
			}
			if gerr != nil {
				err = fmt.Errorf("%w (and the stream info confirming it failed: %v)", err, gerr)
			}
		}
		select {
		case <-ctx.Done():
			return "unverified", "", err
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// removed reports whether the stream's leader no longer holds ack.Sequence:
// below its first sequence, or among its interior deletes. Stream info is
// answered by the stream leader, which acknowledged the sequence, so unlike
// a direct get it cannot miss a message it has not applied yet.
func removed(ctx context.Context, r storedReader, ack *jetstream.PubAck, timeout time.Duration) (bool, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := r.Stream(rctx, ack.Stream)
	if err != nil {
		return false, err
	}
	if st := s.CachedInfo().State; st.LastSeq >= ack.Sequence && st.FirstSeq > ack.Sequence {
		return true, nil
	}
	info, err := s.Info(rctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return false, err
	}
	if info.State.LastSeq < ack.Sequence {
		return false, nil
	}
	if info.State.FirstSeq > ack.Sequence {
		return true, nil
	}
	for _, d := range info.State.Deleted {
		if d == ack.Sequence {
			return true, nil
		}
	}
	return false, nil
}

// getStored is one read of the message at ack.Sequence, bounded by timeout.
func getStored(ctx context.Context, r storedReader, ack *jetstream.PubAck, timeout time.Duration) (*jetstream.RawStreamMsg, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := r.Stream(rctx, ack.Stream)
	if err != nil {
		return nil, err
	}
	return s.GetMsg(rctx, ack.Sequence)
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

package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// throttledSink answers its first attempt like Slack or Teams throttling
// (429 with Retry-After) and records when each attempt came.
type throttledSink struct {
	mu       sync.Mutex
	attempts []time.Time
	wait     time.Duration
}

func (s *throttledSink) Send(context.Context, *notify.Notification) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = append(s.attempts, time.Now())
	if len(s.attempts) == 1 {
		return true, &notify.SendError{Reason: notify.ReasonRateLimited, Status: 429, RetryAfter: s.wait}
	}
	return false, nil
}

func (s *throttledSink) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts...)
}

// TestRetryAfterIsHonoured: the retry after a throttled attempt waits at
// least the receiver's Retry-After, not the (much shorter) backoff.
func TestRetryAfterIsHonoured(t *testing.T) {
	e := newEnv(t, notifierConfig())
	sink := &throttledSink{wait: 700 * time.Millisecond}
	e.start([]config.Route{fastRoute("ops", "chat")}, []dispatch.Receiver{{Name: "chat", Sink: sink, Limiter: limiter(), Timeout: 5 * time.Second}}, nil)
	e.publishCleanup(1, events.SeverityInfo)
	e.waitSettled("the throttled notification delivered on its second attempt")
	at := sink.times()
	if len(at) != 2 {
		t.Fatalf("%d attempts, want 2", len(at))
	}
	if gap := at[1].Sub(at[0]); gap < sink.wait {
		t.Fatalf("retried after %s, Retry-After was %s (backoff %s)", gap, sink.wait, e.settings.RetryInitial)
	}
}

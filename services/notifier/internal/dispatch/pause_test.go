package dispatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/shared/testkit"
)

type switchPause struct{ on atomic.Bool }

func (s *switchPause) Paused() (pause.Record, bool) {
	return pause.Record{By: "sre", Since: time.Unix(1, 0)}, s.on.Load()
}

// A paused notifier sends nothing and acks nothing: the messages are held
// (kept alive past AckWait) and sent once, each, when the pause ends.
func TestPausedNotifierHoldsAndSendsAfterResume(t *testing.T) {
	n := notifierConfig()
	n.AckWait = config.D(time.Second) // held past several AckWaits: kept alive, not redelivered
	e := newEnv(t, n)
	p := &switchPause{}
	p.on.Store(true)
	e.pause = p
	h := newHook(t)
	e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL+"/hook")}, nil)
	for i := range 3 {
		e.publishCleanup(i, events.SeverityWarning)
	}
	testkit.Never(t, 3*time.Second, "a card sent while paused", func() bool { n, _ := h.got(); return n > 0 })
	if o := e.outcomesOf("hook", dispatch.OutcomeDelivered); len(o) != 0 {
		t.Fatalf("outcomes while paused: %+v", o)
	}
	p.on.Store(false)
	testkit.Eventually(t, 5*time.Second, "the three events delivered after the resume", func() bool {
		_, ids := h.got()
		return len(ids) == 3
	})
	_, ids := h.got()
	for id, k := range ids {
		if k != 1 {
			t.Fatalf("event %s sent %d times, want once", id, k)
		}
	}
}

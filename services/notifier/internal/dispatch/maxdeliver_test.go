package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/testkit"
)

// TestMaxDeliverGiveUpIsReported: a message parked in the DLQ on its
// maxDeliver-th delivery is a final result (the event is not delivered)
// like any other dead letter: whoever watches the outcome subject
// (published after every final delivery result) hears of it, as a failed
// outcome with reason max_deliver, and deliveries_total/events_total count
// it failed.
func TestMaxDeliverGiveUpIsReported(t *testing.T) {
	n := notifierConfig()
	n.MaxDeliver = 3
	e := newEnv(t, n)
	e.settings.MaxDeliver = 3
	h := newHook(t)
	crashes := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
		if md, _ := m.Metadata(); md.NumDelivered < 3 {
			_ = m.Nak()
			return
		}
		d.Handle(ctx, m)
	}
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, crashes)
	p := e.publishCleanup(1, events.SeverityInfo)
	e.waitSettled("the message acked on its last delivery")
	testkit.Eventually(t, 5*time.Second, "a failed outcome", func() bool { return len(e.outcomesOf("hook", dispatch.OutcomeFailed)) > 0 })
	if got := e.eventIDs("hook", dispatch.OutcomeFailed); len(got) != 1 || got[p.id] != 1 {
		t.Errorf("failed outcomes %v, want one for %s", got, p.id)
	}
	if o := e.outcomesOf("hook", dispatch.OutcomeFailed)[0]; o.Reason != "max_deliver" || o.Route != "ops" || o.Events != 1 {
		t.Errorf("failed outcome %+v, want route ops, reason max_deliver, 1 event", o)
	}
	if v := value(eng.metrics.Events.WithLabelValues("hook", dispatch.OutcomeFailed)); v != 1 {
		t.Errorf("opswire_notifier_events_total{outcome=failed} = %v, want 1", v)
	}
	if v := value(eng.metrics.Deliveries.WithLabelValues("hook", dispatch.OutcomeFailed)); v != 1 {
		t.Errorf("opswire_notifier_deliveries_total{outcome=failed} = %v, want 1", v)
	}
	if n, _ := h.got(); n != 0 {
		t.Errorf("%d requests to the receiver, want none", n)
	}
}

// TestDuplicateRouteNamesDoNotDoubleCount: the config refuses two routes of
// one name (shared/config TestDuplicateRouteNamesRefused); a table built
// without it still treats a name as one route, so an event both match (the
// first with continue) is listed once in one card, not twice in the group
// "<name>/<kind>", and its message is settled.
func TestDuplicateRouteNamesDoNotDoubleCount(t *testing.T) {
	e := newEnv(t, notifierConfig())
	h := newHook(t)
	r1, r2 := fastRoute("x", "hook"), fastRoute("x", "hook")
	r1.Continue = true
	e.start([]config.Route{r1, r2}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)
	p := e.publishCleanup(1, events.SeverityInfo)
	e.waitSettled("acked")
	if _, ids := h.got(); ids[p.id] != 1 {
		t.Errorf("event %s listed %d times at the receiver, want 1", p.id, ids[p.id])
	}
}

// TestReceiverListedTwiceGetsOneCard: the config refuses a receiver listed
// twice in one route (shared/config TestReceiverListedTwiceRefused); a
// table built without it still sends the receiver one card per event, and
// the message is settled.
func TestReceiverListedTwiceGetsOneCard(t *testing.T) {
	tests := []struct {
		name     string
		routes   []config.Route
		defaults []string
	}{
		{"in a route", []config.Route{fastRoute("x", "hook", "hook")}, nil},
		{"in defaultReceivers", nil, []string{"hook", "hook"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			h := newHook(t)
			e.defaults = tc.defaults
			eng := e.start(tc.routes, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)
			p := e.publishCleanup(1, events.SeverityInfo)
			e.waitSettled("acked")
			if n, ids := h.got(); n != 1 || ids[p.id] != 1 {
				t.Errorf("%d requests, event %s listed %d times at the receiver; want one card with it once", n, p.id, ids[p.id])
			}
			if v := value(eng.metrics.Deliveries.WithLabelValues("hook", dispatch.OutcomeDelivered)); v != 1 {
				t.Errorf("%v deliveries counted, want 1", v)
			}
		})
	}
}

// TestMaxDeliverGiveUpDoesNotReportADeliveredPairFailed: a message given up
// after maxDeliver deliveries has two routes to one receiver; an earlier
// delivery got route a's card out (its record says delivered), route b is
// what kept it unsettled. The park reads the records first: a is reported
// dropped (already delivered), not failed, and neither dead-lettered nor
// counted failed; only b is.
func TestMaxDeliverGiveUpDoesNotReportADeliveredPairFailed(t *testing.T) {
	n := notifierConfig()
	n.MaxDeliver = 3
	e := newEnv(t, n)
	e.settings.MaxDeliver = 3
	h := newHook(t)
	p := e.publishCleanup(1, events.SeverityInfo)
	records := &dispatch.KVDelivered{KV: e.kv}
	if err := records.Mark(context.Background(), []string{dispatch.DeliveredKey(cluster, "a", "hook", p.id)}, dispatch.RecordDelivered); err != nil {
		t.Fatal(err)
	}
	crashes := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
		if md, _ := m.Metadata(); md.NumDelivered < 3 {
			_ = m.Nak()
			return
		}
		d.Handle(ctx, m)
	}
	ra := fastRoute("a", "hook")
	ra.Continue = true
	eng := e.start([]config.Route{ra, fastRoute("b", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, crashes)
	e.waitSettled("the message acked on its last delivery")
	// Route a's outcome (whichever it is) is published before route b's.
	ofRoute := func(outcome, route string) []dispatch.Outcome {
		var out []dispatch.Outcome
		for _, o := range e.outcomesOf("hook", outcome) {
			if o.Route == route {
				out = append(out, o)
			}
		}
		return out
	}
	testkit.Eventually(t, 5*time.Second, "outcomes of both routes", func() bool {
		return len(ofRoute(dispatch.OutcomeFailed, "b")) > 0 &&
			len(ofRoute(dispatch.OutcomeFailed, "a"))+len(ofRoute(dispatch.OutcomeDropped, "a")) > 0
	})
	for _, o := range ofRoute(dispatch.OutcomeFailed, "a") {
		t.Errorf("failed outcome %+v for route a, whose pair the records call delivered", o)
	}
	if got := ofRoute(dispatch.OutcomeDropped, "a"); len(got) != 1 || got[0].Reason != "already_delivered" {
		t.Errorf("route a outcomes dropped %+v, want one, reason already_delivered", got)
	}
	if got := ofRoute(dispatch.OutcomeFailed, "b"); len(got) != 1 || got[0].Reason != "max_deliver" {
		t.Errorf("route b outcomes failed %+v, want one, reason max_deliver", got)
	}
	if v := value(eng.metrics.Events.WithLabelValues("hook", dispatch.OutcomeFailed)); v != 1 {
		t.Errorf("events_total{hook,failed} = %v, want 1 (route b only)", v)
	}
	if v := value(eng.metrics.DeadLetters.WithLabelValues("hook", "max_deliver")); v != 1 {
		t.Errorf("dead_letters_total{hook,max_deliver} = %v, want 1 (route b only)", v)
	}
	if n, _ := h.got(); n != 0 {
		t.Errorf("%d requests to the receiver, want none", n)
	}
}

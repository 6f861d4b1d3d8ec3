package cordon

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/events"
)

type fakeNodes map[string]*events.NodeState

func (f fakeNodes) Node(name string) (*events.NodeState, bool) { n, ok := f[name]; return n, ok }
func (f fakeNodes) Nodes() []*events.NodeState {
	var out []*events.NodeState
	for _, n := range f {
		out = append(out, n)
	}
	return out
}

// drainStates are the states a watcher publishes for a node opswire
// cordoned at 4 pods (minPods 2) while a person drains it: one eviction
// counted, then a recount that shows the second eviction's lower count
// before the pod's sync counted the departure, then that departure.
func drainStates() (before, early, counted *events.NodeState) {
	st := func(pods, departed, streak int) *events.NodeState {
		return node(pods, unschedulable, withLabel(events.LabelAutoCordon, ""), withMark(EffectCordon), func(n *events.NodeState) {
			n.Departed, n.DepartedEvicted, n.EvictionStreak = departed, departed, streak
		})
	}
	return st(3, 1, 1), st(2, 1, 1), st(2, 2, 2)
}

func drainPolicy() Policy {
	return withPolicy("cordon", func(p *Policy) { p.MaxPods, p.MinPods, p.DrainEvictedPercent = 4, 2, 50 })
}

func TestChangesPostponeReleaseUntilDeparturesCounted(t *testing.T) {
	before, early, counted := drainStates()
	p := drainPolicy()
	if d := Evaluate(p, early, true); d.Action != ActionUncordon {
		t.Fatalf("the early state alone decides %s (%s), the case this guards against is a release", d.Action, d.Code)
	}
	if d := Evaluate(p, counted, true); d.Action != ActionHandOver {
		t.Fatalf("with the departure counted the decision is %s (%s), want a handover", d.Action, d.Code)
	}

	now := time.Unix(1000, 0)
	ch := NewChanges()
	ch.now = func() time.Time { return now }
	ch.OnNode(nil, before)
	if w := ch.departuresPending("n1"); w != 0 {
		t.Fatalf("first state: pending %v, want 0", w)
	}
	ch.OnNode(before, early)
	if w := ch.departuresPending("n1"); w != departureWait {
		t.Fatalf("count fell without its departure: pending %v, want %v", w, departureWait)
	}

	// The controller postpones the release: nothing reaches the actuator
	// (nil here: a call would panic), and the node comes back soon.
	c := &Controller{nodes: fakeNodes{"n1": early}, policy: p, ledger: NewLedger(false), changes: ch, queue: ch.queue,
		m: NewMetrics(nil), log: zerolog.Nop()}
	out, err := c.reconcile(context.Background(), "n1")
	if err != nil || out.RequeueAfter <= 0 || out.RequeueAfter > time.Second {
		t.Fatalf("reconcile of the early state: %+v, %v; want a requeue within 1s and no action", out, err)
	}

	// The state carrying the departure closes the gap.
	now = now.Add(2 * time.Second)
	ch.OnNode(early, counted)
	if w := ch.departuresPending("n1"); w != 0 {
		t.Fatalf("departure counted: pending %v, want 0", w)
	}

	// A gap never closed (totals lost with KUBE) waits departureWait, then
	// the release goes ahead.
	ch.OnNode(nil, before)
	ch.OnNode(before, early)
	now = now.Add(departureWait - time.Millisecond)
	if w := ch.departuresPending("n1"); w != time.Millisecond {
		t.Fatalf("just before the bound: pending %v, want 1ms", w)
	}
	now = now.Add(time.Millisecond)
	if w := ch.departuresPending("n1"); w != 0 {
		t.Fatalf("at the bound: pending %v, want 0", w)
	}
}

func TestChangesGapRules(t *testing.T) {
	st := func(pods, departed int) *events.NodeState {
		return node(pods, func(n *events.NodeState) { n.Departed = departed })
	}
	for _, tc := range []struct {
		name    string
		states  []*events.NodeState
		pending bool
	}{
		{"departures account for the fall", []*events.NodeState{st(5, 0), st(3, 2)}, false},
		{"count rose", []*events.NodeState{st(3, 0), st(5, 0)}, false},
		{"one departure missing", []*events.NodeState{st(5, 0), st(3, 1)}, true},
		{"gap measured from where it opened", []*events.NodeState{st(5, 0), st(4, 0), st(3, 1)}, true},
		{"gap closed over two states", []*events.NodeState{st(5, 0), st(4, 0), st(3, 2)}, false},
		{"deleted node", []*events.NodeState{st(5, 0), st(3, 0), nil}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := NewChanges()
			var prev *events.NodeState
			for _, s := range tc.states {
				if s == nil {
					ch.OnNode(prev, nil)
					if !ch.takeDeleted("n1") || ch.takeDeleted("n1") {
						t.Fatal("a deletion must be reported once")
					}
				} else {
					ch.OnNode(prev, s)
				}
				prev = s
			}
			if got := ch.departuresPending("n1") > 0; got != tc.pending {
				t.Fatalf("pending = %v, want %v", got, tc.pending)
			}
		})
	}
}

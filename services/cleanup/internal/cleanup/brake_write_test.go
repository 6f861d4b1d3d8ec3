package cleanup

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/events"
)

// TestBrakeJudgedAtTheWrite: the brake is judged on the node count as it
// stands right before the write, not on the count the mirror's decision was
// made on. Six nodes, all Ready, when a plain pod stuck Terminating is
// decided on (ForceDelete); while its live GET is in flight the mirror
// reports nodes going Unknown. With four of six Unknown the pod is held
// (MassNodeFailure) and nothing is written; with one (no brake) it is
// force-deleted, the control.
func TestBrakeJudgedAtTheWrite(t *testing.T) {
	stuck := pod(deleting(t0.Add(-6 * time.Minute)))
	for _, tc := range []struct {
		name    string
		unknown int // nodes going Unknown during the pod's GET
		writes  string
		ops     string
	}{
		{"four of six nodes go Unknown during the GET: held", 4, "", "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/MassNodeFailure"},
		{"one of six goes Unknown during the GET: force-deleted", 1, "delete pods", "ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			r := newRig(t, p, false, nil, livePod(liveDeleting))
			state := &memState{pods: map[string]*events.PodState{}, nodes: map[string]*events.NodeState{}}
			for i := range 6 {
				name := fmt.Sprintf("n%d", i)
				state.nodes[name] = &events.NodeState{Name: name, Ready: "True"}
			}
			tally := NewNodeTally()
			tally.Reset(state)
			nodes, _ := tally.Count()
			f := Facts{Now: t0, Nodes: nodes, Tally: tally}
			d := p.Decide(stuck, f)
			if d.Action != ForceDelete {
				t.Fatalf("mirror decision %v, want ForceDelete", d.Action)
			}
			r.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				for i := range tc.unknown { // the mirror's node events, counted meanwhile
					name := fmt.Sprintf("n%d", i)
					tally.Observe(state.nodes[name], &events.NodeState{Name: name, Ready: "Unknown"})
				}
				return false, nil, nil
			})
			if _, err := r.act.Handle(context.Background(), stuck, d, f); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			if got := strings.Join(r.writes(), ","); got != tc.writes {
				t.Errorf("writes = [%s], want [%s]", got, tc.writes)
			}
			if got := strings.Join(opsSummary(t, r.pub.All()), "\n"); got != tc.ops {
				t.Errorf("OPS = %s, want %s", got, tc.ops)
			}
		})
	}
}

// TestNodeTallyCountsEachEventOnce: the tally follows node events one by
// one (added, readiness changed, deleted, an event repeated) and a full
// count agrees with it.
func TestNodeTallyCountsEachEventOnce(t *testing.T) {
	tally := NewNodeTally()
	if _, counted := tally.Count(); counted {
		t.Fatal("a tally never reset reports a count")
	}
	a := &events.NodeState{Name: "a", Ready: "True"}
	b := &events.NodeState{Name: "b", Ready: "Unknown"}
	bReady := &events.NodeState{Name: "b", Ready: "True"}
	state := &memState{nodes: map[string]*events.NodeState{"a": a}}
	tally.Reset(state)
	for _, step := range []struct {
		old, cur *events.NodeState
		want     NodeCount
	}{
		{nil, b, NodeCount{Nodes: 2, NotReady: 1}},
		{nil, b, NodeCount{Nodes: 2, NotReady: 1}}, // the same add again (a resync)
		{b, bReady, NodeCount{Nodes: 2}},
		{a, nil, NodeCount{Nodes: 1}},
		{a, nil, NodeCount{Nodes: 1}}, // a deletion seen twice
	} {
		tally.Observe(step.old, step.cur)
		if got, _ := tally.Count(); got != step.want {
			t.Fatalf("after %v -> %v: count %+v, want %+v", step.old, step.cur, got, step.want)
		}
	}
	state.nodes = map[string]*events.NodeState{"b": bReady}
	tally.Reset(state)
	if got, _ := tally.Count(); got != (NodeCount{Nodes: 1}) {
		t.Fatalf("full count %+v, want 1 node, all Ready", got)
	}
}

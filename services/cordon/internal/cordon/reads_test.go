package cordon

import (
	"context"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// countingFleet is a FleetCounter that records each API count it is asked
// for and answers with a set fleet, counted at asOf.
type countingFleet struct {
	f    Fleet
	asOf string
	mu   sync.Mutex
	live []string // notOlderThan of each Live call
}

func (c *countingFleet) Mirror(string) Fleet { return c.f }

func (c *countingFleet) Live(_ context.Context, notOlderThan, _ string) (Fleet, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = append(c.live, notOlderThan)
	f := c.f
	f.asOf = c.asOf
	return f, nil
}

// TestActuatorReadsFromTheWatchCache: a cordon re-reads the node at least
// as new as the mirror's version (a watch-cache GET), recounts the pods, and
// counts the fleet for the cap beside them; the count is taken again only
// when it was served older than the node acted on. An uncordon never counts.
func TestActuatorReadsFromTheWatchCache(t *testing.T) {
	for _, tc := range []struct {
		name      string
		asOf      string
		wantLives []string
	}{
		{"count as new as the node: taken once, beside the reads", "41", []string{"41"}},
		{"count served older than the node: taken again at the node's version", "40", []string{"41", "41"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := apiNode("a")
			h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{node}, pods("a", 100)...)...)
			fleet := &countingFleet{f: Fleet{Managed: 10}, asOf: tc.asOf}
			h.act.fleet = fleet
			state := mirrorOf(node, 100)
			if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
				t.Fatal(err)
			}
			var gets int
			for _, a := range h.client.Actions() {
				if g, ok := a.(k8stesting.GetActionImpl); ok && g.GetResource().Resource == "nodes" {
					gets++
				}
			}
			if gets != 1 {
				t.Fatalf("%d node GETs, want 1", gets)
			}
			if !h.node(t, "a").Spec.Unschedulable {
				t.Fatal("not cordoned")
			}
			if len(fleet.live) != len(tc.wantLives) {
				t.Fatalf("fleet counted %d times (%v), want %v", len(fleet.live), fleet.live, tc.wantLives)
			}
			for i := range fleet.live {
				if fleet.live[i] != tc.wantLives[i] {
					t.Fatalf("fleet counted not older than %v, want %v", fleet.live, tc.wantLives)
				}
			}
		})
	}
	t.Run("uncordon: no fleet count", func(t *testing.T) {
		node := apiNode("a", ours(EffectCordon))
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{node}, pods("a", 80)...)...)
		fleet := &countingFleet{f: Fleet{Managed: 10}}
		h.act.fleet = fleet
		state := mirrorOf(node, 80)
		d := Evaluate(seedPolicy("cordon"), state, true)
		if d.Action != ActionUncordon {
			t.Fatalf("test setup: decision %s", d.Action)
		}
		if _, err := h.act.Apply(context.Background(), state, true, d); err != nil {
			t.Fatal(err)
		}
		if h.node(t, "a").Spec.Unschedulable {
			t.Fatal("not uncordoned")
		}
		if len(fleet.live) != 0 {
			t.Fatalf("an uncordon counted the fleet %d times", len(fleet.live))
		}
	})
}

// TestActuatorNodeReadNamesTheMirrorVersion: the re-read GET names the
// mirror's resourceVersion, so the API server answers it from its watch
// cache, at least that new (the patch's precondition rejects a stale read).
func TestActuatorNodeReadNamesTheMirrorVersion(t *testing.T) {
	node := apiNode("a")
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{node}, pods("a", 100)...)...)
	state := mirrorOf(node, 100)
	state.ResourceVersion = "39" // the mirror is a little behind
	if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
		t.Fatal(err)
	}
	var opts []metav1.GetOptions
	for _, a := range h.client.Actions() {
		if g, ok := a.(k8stesting.GetActionImpl); ok && g.GetResource().Resource == "nodes" {
			opts = append(opts, g.GetOptions)
		}
	}
	if len(opts) != 1 || opts[0].ResourceVersion != "39" {
		t.Fatalf("node GETs with options %+v, want one at resourceVersion 39", opts)
	}
	if !h.node(t, "a").Spec.Unschedulable {
		t.Fatal("not cordoned from the newer live version")
	}
}

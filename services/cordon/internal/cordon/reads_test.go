package cordon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/events"
)

// readPath is one way the actuator re-reads a node before a new cordon:
// the node's item in the cap's LIST of every node (the fleet counted from
// the API), or a GET (a fleet counter without the API, or a failed count).
// The tests of the write path run on both.
type readPath struct {
	name     string
	apiFleet bool
}

var readPaths = []readPath{{"fixed fleet, node GET", false}, {"API fleet, node from the cap's LIST", true}}

// use sets the harness up for the path: with the API fleet, the cap is
// counted from the harness's fake API, over a mirror holding states.
func (p readPath) use(h *harness, states ...*events.NodeState) {
	if p.apiFleet {
		h.withAPIFleet(staticNodes(states))
	}
}

// nodeReads returns the options of the node GETs and LISTs the harness's
// client saw, and the patches.
func nodeReads(h *harness) (gets []metav1.GetOptions, lists []metav1.ListOptions, patches []string) {
	for _, a := range h.client.Actions() {
		switch a := a.(type) {
		case k8stesting.GetActionImpl:
			if a.GetResource().Resource == "nodes" {
				gets = append(gets, a.GetOptions)
			}
		case k8stesting.ListActionImpl:
			if a.GetResource().Resource == "nodes" {
				lists = append(lists, a.GetListOptions())
			}
		case k8stesting.PatchActionImpl:
			patches = append(patches, string(a.GetPatch()))
		}
	}
	return gets, lists, patches
}

// TestActuatorNewCordonReadsTheNodeFromTheCapList: a new cordon takes the
// node from the cap's LIST (watch cache, at least as new as the mirror's
// version) instead of a GET of its own: node LIST + pod recount + patch,
// and the patch's preconditions are the listed item's uid and version. An
// uncordon reads the node with one GET and counts no fleet. A failed LIST
// falls back to the GET and fails closed: no count, no cordon.
func TestActuatorNewCordonReadsTheNodeFromTheCapList(t *testing.T) {
	t.Run("cordon", func(t *testing.T) {
		node := apiNode("a")
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node, apiNode("b")}, pods("a", 100)...)...)
		state := mirrorOf(node, 100)
		state.ResourceVersion = "39" // the mirror is a little behind
		h.withAPIFleet(staticNodes{state})
		if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
			t.Fatal(err)
		}
		gets, lists, patches := nodeReads(h)
		if len(gets) != 0 {
			t.Fatalf("node GETs %+v: the cap's LIST holds the node", gets)
		}
		if len(lists) != 1 || lists[0].ResourceVersion != "39" || lists[0].ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
			t.Fatalf("node LISTs %+v, want one at least as new as the mirror's 39", lists)
		}
		if len(patches) != 1 || !strings.Contains(patches[0], `"resourceVersion":"41"`) || !strings.Contains(patches[0], `"uid":"uid-a"`) {
			t.Fatalf("patches %v, want one with the listed item's preconditions", patches)
		}
		var podLists int
		for _, a := range h.client.Actions() {
			if a.GetVerb() == "list" && a.GetResource().Resource == "pods" {
				podLists++
			}
		}
		if podLists != 1 {
			t.Fatalf("%d pod recounts, want 1", podLists)
		}
		if !h.node(t, "a").Spec.Unschedulable {
			t.Fatal("not cordoned")
		}
	})
	t.Run("a mark in the listed item is learnt", func(t *testing.T) {
		node := apiNode("a", ours(EffectCordon))
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node}, pods("a", 95)...)...)
		stale := staleMirror([]string{"a"}, map[string]int{"a": 100})
		h.withAPIFleet(stale)
		if _, err := h.act.Apply(context.Background(), stale[0], false, Evaluate(seedPolicy("cordon"), stale[0], false)); err != nil {
			t.Fatal(err)
		}
		if gets, _, patches := nodeReads(h); len(gets) != 0 || len(patches) != 0 {
			t.Fatalf("GETs %v, patches %v: want neither", gets, patches)
		}
		if !h.ledger.Marked(stale[0]) {
			t.Fatal("the mark found in the LIST is not counted")
		}
	})
	t.Run("uncordon: one GET, no LIST", func(t *testing.T) {
		node := apiNode("a", ours(EffectCordon))
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node}, pods("a", 80)...)...)
		state := mirrorOf(node, 80)
		h.withAPIFleet(staticNodes{state})
		if _, err := h.act.Apply(context.Background(), state, true, Evaluate(seedPolicy("cordon"), state, true)); err != nil {
			t.Fatal(err)
		}
		gets, lists, patches := nodeReads(h)
		if len(gets) != 1 || gets[0].ResourceVersion != "41" || len(lists) != 0 || len(patches) != 1 {
			t.Fatalf("node GETs %+v, LISTs %+v, patches %d: want one GET at 41, no LIST, one patch", gets, lists, len(patches))
		}
	})
	t.Run("failed LIST: GET, no cordon", func(t *testing.T) {
		node := apiNode("a")
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node}, pods("a", 100)...)...)
		state := mirrorOf(node, 100)
		h.withAPIFleet(staticNodes{state})
		h.client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("etcd away")
		})
		if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err == nil {
			t.Fatal("a cordon without a count: want an error")
		}
		if gets, _, patches := nodeReads(h); len(gets) != 1 || len(patches) != 0 {
			t.Fatalf("GETs %v, patches %v: want the GET fallback and no patch", gets, patches)
		}
	})
}

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

// TestActuatorListedItemGuards: the three rules that make the cap's LIST as
// safe a re-read as the GET it replaces, each broken on its own would go
// unseen by the tests above.
func TestActuatorListedItemGuards(t *testing.T) {
	// A mirror state without a resourceVersion (an older watcher) gives the
	// LIST no version to be at least as new as: the LIST may then be any
	// version the watch cache holds, so the node is read with a GET naming
	// none (a consistent read), and the patch's preconditions come from it,
	// not from the listed item.
	t.Run("mirror state without a version: the GET, not the listed item", func(t *testing.T) {
		node := apiNode("a")
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node}, pods("a", 100)...)...)
		state := mirrorOf(node, 100)
		state.ResourceVersion = ""
		h.withAPIFleet(staticNodes{state})
		old := node.DeepCopy()
		old.ResourceVersion = "35" // what an old cache snapshot holds
		h.client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "41"}, Items: []corev1.Node{*old}}, nil
		})
		if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
			t.Fatal(err)
		}
		gets, lists, patches := nodeReads(h)
		if len(gets) != 1 || gets[0].ResourceVersion != "" {
			t.Fatalf("node GETs %+v, want one consistent read (no resourceVersion)", gets)
		}
		if len(lists) != 1 {
			t.Fatalf("node LISTs %+v, want the cap's count once", lists)
		}
		if len(patches) != 1 || !strings.Contains(patches[0], `"resourceVersion":"41"`) {
			t.Fatalf("patches %v, want one with the GET's version 41, not the listed 35", patches)
		}
	})
	// The LIST is at least as new as opswire's newest write, not only as
	// the mirror's version: a cap count that missed the replica's own last
	// cordon could let the cap be exceeded.
	t.Run("the LIST is at least as new as opswire's newest write", func(t *testing.T) {
		node := apiNode("a")
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node}, pods("a", 100)...)...)
		state := mirrorOf(node, 100)
		state.ResourceVersion = "39"
		h.withAPIFleet(staticNodes{state})
		h.act.lastWrite = "50"
		if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
			t.Fatal(err)
		}
		if _, lists, _ := nodeReads(h); len(lists) != 1 || lists[0].ResourceVersion != "50" ||
			lists[0].ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
			t.Fatalf("node LISTs %+v, want one not older than the last write's 50", lists)
		}
	})
	// The listed item is what the API says now, and the ledger learns it
	// whether marked or not: a mirror state older than it that still shows a
	// mark (the mark removed since, the mirror lagging) must not count
	// toward the cap as a phantom mark.
	t.Run("an unmarked listed item is learnt", func(t *testing.T) {
		node := apiNode("a") // unmarked at 41, and below maxPods: no write
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, append([]runtime.Object{node}, pods("a", 95)...)...)
		state := mirrorOf(node, 100)
		state.ResourceVersion = "39"
		h.withAPIFleet(staticNodes{state})
		if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
			t.Fatal(err)
		}
		if _, _, patches := nodeReads(h); len(patches) != 0 {
			t.Fatalf("patches %v: the live state no longer qualifies", patches)
		}
		lagging := stateFromNode(apiNode("a", ours(EffectCordon)), 100)
		lagging.ResourceVersion = "40" // marked at 40, unmarked at 41
		if h.ledger.Marked(lagging) {
			t.Fatal("a mirror state older than the listed item counts a mark the API no longer carries")
		}
	})
}

// TestActuatorCountTakenAgainAtTheNewestWrite: a count taken beside a GET
// and served older than the node is taken again, at least as new as the
// node and opswire's newest write, whichever is newer.
func TestActuatorCountTakenAgainAtTheNewestWrite(t *testing.T) {
	node := apiNode("a")
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{node}, pods("a", 100)...)...)
	fleet := &countingFleet{f: Fleet{Managed: 10}, asOf: "40"}
	h.act.fleet = fleet
	h.act.lastWrite = "50"
	state := mirrorOf(node, 100)
	if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
		t.Fatal(err)
	}
	if want := []string{"50", "50"}; strings.Join(fleet.live, ",") != strings.Join(want, ",") {
		t.Fatalf("fleet counted not older than %v, want %v", fleet.live, want)
	}
}

package cordon

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opswire/opswire/shared/events"
)

// markOf writes opswire's annotation listing effects and the taint keys of
// its taint effect.
func markOf(effects []string, taintKeys ...string) nodeOpt {
	return func(n *events.NodeState) {
		b, _ := json.Marshal(Mark{Effects: effects, TaintKeys: taintKeys})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[events.AnnotationAutoCordon] = string(b)
	}
}

// TestEvaluateFollowsTheMarkNotTheMode: a node opswire holds is judged by
// the effects its mark lists, not by the current mode or taintKey. After a
// switch of mode (or taintKey) a held node at maxPods still has everything
// its mark lists in place: it holds, nothing is re-applied. Only an effect
// the mark lists that is gone is put back, and the decision names it.
func TestEvaluateFollowsTheMarkNotTheMode(t *testing.T) {
	const key = events.LabelAutoCordon
	newKey := withPolicy(EffectTaint, func(p *Policy) { p.TaintKey = "example.com/full" })
	tests := []struct {
		name       string
		policy     Policy
		node       *events.NodeState
		action     Action
		code       string
		wantEffect string
	}{
		{"cordon mark, switched to taint: holds", seedPolicy(EffectTaint),
			node(120, unschedulable, markOf([]string{EffectCordon})), ActionNone, CodeHolding, ""},
		{"taint mark, switched to cordon: holds", seedPolicy(EffectCordon),
			node(120, tainted(key), markOf([]string{EffectTaint}, key)), ActionNone, CodeHolding, ""},
		{"taint mark, taintKey changed: holds", newKey,
			node(120, tainted(key), markOf([]string{EffectTaint}, key)), ActionNone, CodeHolding, ""},
		{"cordon mark, switched to taint, a person uncordoned: the cordon is put back", seedPolicy(EffectTaint),
			node(120, markOf([]string{EffectCordon})), ActionCordon, CodeReapply, EffectCordon},
		{"taint mark, switched to cordon, the taint removed: the taint is put back", seedPolicy(EffectCordon),
			node(120, markOf([]string{EffectTaint}, key)), ActionCordon, CodeReapply, EffectTaint},
		{"taint mark, taintKey changed, the taint removed: put back", newKey,
			node(120, markOf([]string{EffectTaint}, key)), ActionCordon, CodeReapply, EffectTaint},
		{"no readable mark: the current mode decides", seedPolicy(EffectTaint),
			node(120, unschedulable), ActionCordon, CodeReapply, EffectTaint},
		{"cordon mark released at minPods after the switch", seedPolicy(EffectTaint),
			node(90, unschedulable, markOf([]string{EffectCordon})), ActionUncordon, CodeMinReached, EffectCordon},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.node.Labels[events.LabelAutoCordon] = MarkLabelValue
			d := Evaluate(tc.policy, tc.node, true)
			if d.Action != tc.action || d.Code != tc.code {
				t.Fatalf("Evaluate = %s/%s (%s), want %s/%s", d.Action, d.Code, d.Reason, tc.action, tc.code)
			}
			if d.Effect != tc.wantEffect {
				t.Fatalf("effect %q, want %q", d.Effect, tc.wantEffect)
			}
			if tc.code == CodeReapply && !strings.Contains(d.Reason, "the "+tc.wantEffect+" was removed") {
				t.Fatalf("reason %q does not name the effect put back", d.Reason)
			}
		})
	}
}

// TestActuatorReapplyPutsBackWhatTheMarkLists: the mark lists the cordon
// (written in cordon mode), the mode is now taint, and a person uncordoned
// the node at maxPods leaving the mark. The re-apply sets spec.unschedulable
// again and adds no taint; the mark still lists the cordon alone, and the
// audit names the cordon.
func TestActuatorReapplyPutsBackWhatTheMarkLists(t *testing.T) {
	pol := seedPolicy(EffectTaint)
	n := apiNode("a", ours(EffectCordon), func(n *corev1.Node) { n.Spec.Unschedulable = false })
	h := newHarness(t, pol, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 120)...)...)
	state := mirrorOf(n, 120)
	d := Evaluate(pol, state, true)
	if d.Code != CodeReapply {
		t.Fatalf("decision %s/%s, want a re-apply", d.Action, d.Code)
	}
	if _, err := h.act.Apply(context.Background(), state, true, d); err != nil {
		t.Fatal(err)
	}
	got := h.node(t, "a")
	if !got.Spec.Unschedulable || len(got.Spec.Taints) != 0 {
		t.Fatalf("re-apply wrote unschedulable=%v taints=%v, want the cordon back and no taint", got.Spec.Unschedulable, got.Spec.Taints)
	}
	m, ok := readMark(got.Annotations)
	if !ok || !slices.Equal(m.Effects, []string{EffectCordon}) {
		t.Fatalf("mark %+v, want the cordon alone", m)
	}
	msgs := decisions(t, h.pub)
	if len(msgs) != 1 || msgs[0].D.Verb != VerbCordoned || msgs[0].D.Mode != EffectCordon {
		t.Fatalf("published %+v, want one cordoned naming the cordon", msgs)
	}
}

// TestActuatorNoWriteToHeldNodesAfterAModeSwitch: three nodes opswire
// cordoned in cordon mode, at maxPods; the actor restarts in taint mode.
// Nothing is written or published for any of them.
func TestActuatorNoWriteToHeldNodesAfterAModeSwitch(t *testing.T) {
	pol := seedPolicy(EffectTaint)
	var objs []runtime.Object
	var states []*events.NodeState
	for _, name := range []string{"a", "b", "c"} {
		n := apiNode(name, ours(EffectCordon))
		objs = append(objs, n)
		objs = append(objs, pods(name, 100)...)
		states = append(states, mirrorOf(n, 100))
	}
	h := newHarness(t, pol, false, Fleet{Held: 3, Marks: 3, Managed: 10}, objs...)
	for _, s := range states {
		v, marked := h.ledger.View(pol, s)
		if _, err := h.act.Apply(context.Background(), v, marked, Evaluate(pol, v, marked)); err != nil {
			t.Fatal(err)
		}
	}
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("wrote %v", w)
	}
	if msgs := decisions(t, h.pub); len(msgs) != 0 {
		t.Fatalf("published %+v", msgs)
	}
}

// TestHandoverIsNotAnnouncedAsARefusal: opswire hands a node being drained
// over (the mark goes, the cordon stays) while the cap is full. The mirror
// still shows the node from before the handover (marked, cordoned, at
// maxPods): seen through the ledger it is a person's cordon now, never an
// unmarked schedulable node over maxPods whose cordon the cap refuses.
func TestHandoverIsNotAnnouncedAsARefusal(t *testing.T) {
	pol := seedPolicy(EffectCordon)
	n := apiNode("a", ours(EffectCordon))
	objs := append([]runtime.Object{n}, pods("a", 40)...)
	objs = append(objs, evictingPods("a", 60)...)
	h := newHarness(t, pol, false, Fleet{Held: 2, Marks: 2, Managed: 10}, objs...)
	before := mirrorOf(n, 100)
	before.Evicting = 60
	d := Evaluate(pol, before, true)
	if d.Action != ActionHandOver {
		t.Fatalf("setup: decision %s/%s, want a handover", d.Action, d.Code)
	}
	if _, err := h.act.Apply(context.Background(), before, true, d); err != nil {
		t.Fatal(err)
	}
	<-h.rec.Events // the handover's
	// The mirror has not shown the handover yet: the next reconciles decide
	// on the state from before it.
	for range 3 {
		v, marked := h.ledger.View(pol, before)
		if _, err := h.act.Apply(context.Background(), v, marked, Evaluate(pol, v, marked)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := decisions(t, h.pub)
	if len(msgs) != 1 || msgs[0].D.Verb != VerbHandedOver {
		t.Fatalf("published %+v, want the handover alone", msgs)
	}
	select {
	case ev := <-h.rec.Events:
		t.Fatalf("Event %q recorded after the handover", ev)
	default:
	}
}

// TestLedgerViewOfARelease: what a release leaves on the node, as the ledger
// shows it before the mirror does: an uncordon lifts what the mark lists, a
// handover keeps the cordon, and a release read live shows the live cordon.
func TestLedgerViewOfARelease(t *testing.T) {
	const key = events.LabelAutoCordon
	marked := func(opts ...nodeOpt) *events.NodeState {
		return node(100, append([]nodeOpt{withLabel(key, MarkLabelValue)}, opts...)...)
	}
	tests := []struct {
		name              string
		policy            Policy
		mirror            *events.NodeState
		record            func(l *Ledger)
		wantUnschedulable bool
		wantTaint         bool
	}{
		{"uncordon of a cordon", seedPolicy(EffectCordon), marked(unschedulable, markOf([]string{EffectCordon})),
			func(l *Ledger) { l.RecordRelease("n1", "u1", "9", false) }, false, false},
		{"handover keeps the cordon", seedPolicy(EffectCordon), marked(unschedulable, markOf([]string{EffectCordon})),
			func(l *Ledger) { l.RecordRelease("n1", "u1", "9", true) }, true, false},
		{"uncordon of a taint keeps a drain's cordon", seedPolicy(EffectTaint), marked(unschedulable, tainted(key), markOf([]string{EffectTaint}, key)),
			func(l *Ledger) { l.RecordRelease("n1", "u1", "9", false) }, true, false},
		{"uncordon of a cordon after a switch to taint", seedPolicy(EffectTaint), marked(unschedulable, markOf([]string{EffectCordon})),
			func(l *Ledger) { l.RecordRelease("n1", "u1", "9", false) }, false, false},
		{"release read live, the node still cordoned", seedPolicy(EffectCordon), marked(unschedulable, markOf([]string{EffectCordon})),
			func(l *Ledger) { l.Learn("n1", "u1", "9", false, true) }, true, false},
		{"release read live, the node schedulable", seedPolicy(EffectCordon), marked(unschedulable, markOf([]string{EffectCordon})),
			func(l *Ledger) { l.Learn("n1", "u1", "9", false, false) }, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(false)
			tc.record(l)
			v, isMarked := l.View(tc.policy, tc.mirror)
			_, annotated := v.Annotations[events.AnnotationAutoCordon]
			if isMarked || hasLabel(v, key) || annotated {
				t.Fatalf("view still marked: %v %v", v.Labels, v.Annotations)
			}
			if v.Unschedulable != tc.wantUnschedulable || hasTaint(v, key, "NoSchedule") != tc.wantTaint {
				t.Fatalf("view unschedulable=%v tainted=%v, want %v, %v", v.Unschedulable, hasTaint(v, key, "NoSchedule"),
					tc.wantUnschedulable, tc.wantTaint)
			}
		})
	}
}

// TestDoNotCordonOnAHeldNodeIsAnnouncedOnce: a person labels donotcordon a
// node opswire holds. opswire neither releases nor re-applies it, and says
// so once per episode (skipped, donotcordon-held, a Warning Event), without
// touching the API; an episode ends when the decision changes.
func TestDoNotCordonOnAHeldNodeIsAnnouncedOnce(t *testing.T) {
	pol := seedPolicy(EffectCordon)
	n := apiNode("a", ours(EffectCordon), func(n *corev1.Node) { n.Labels[events.LabelDoNotCordon] = "" })
	h := newHarness(t, pol, false, Fleet{Held: 1, Marks: 1, Managed: 10}, append([]runtime.Object{n}, pods("a", 10)...)...)
	state := mirrorOf(n, 10)
	d := Evaluate(pol, state, true)
	if d.Action != ActionNone || d.Code != CodeDoNotCordonHeld {
		t.Fatalf("decision %s/%s, want none/%s", d.Action, d.Code, CodeDoNotCordonHeld)
	}
	for range 3 {
		if _, err := h.act.Apply(context.Background(), state, true, d); err != nil {
			t.Fatal(err)
		}
	}
	if a := h.client.Actions(); len(a) != 0 {
		t.Fatalf("touched the API: %v", a)
	}
	msgs := decisions(t, h.pub)
	if len(msgs) != 1 {
		t.Fatalf("published %d messages, want 1: %+v", len(msgs), msgs)
	}
	got := msgs[0]
	if got.Subject != "ops.prod.cordon.skipped.a" || got.D.Verb != VerbSkipped || got.D.Code != CodeDoNotCordonHeld ||
		got.D.Severity != events.SeverityWarning || !strings.Contains(got.D.Reason, events.LabelDoNotCordon) {
		t.Fatalf("announcement %+v", got)
	}
	if ev := <-h.rec.Events; !strings.HasPrefix(ev, "Warning "+EventDoNotCordonHeld) {
		t.Fatalf("Event %q", ev)
	}
	// The label goes (the node holds), then comes back: a new episode.
	if _, err := h.act.Apply(context.Background(), state, true, Decision{Action: ActionNone, Code: CodeHolding}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.act.Apply(context.Background(), state, true, d); err != nil {
		t.Fatal(err)
	}
	if msgs := decisions(t, h.pub); len(msgs) != 2 || msgs[0].ID == msgs[1].ID {
		t.Fatalf("second episode: %+v", msgs)
	}
}

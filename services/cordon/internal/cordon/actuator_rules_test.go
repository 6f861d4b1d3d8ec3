package cordon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opswire/opswire/shared/events"
)

// evictingPods builds count running pods on node, all being evicted through
// the Eviction API, named <node>-e<i>.
func evictingPods(node string, count int) []runtime.Object {
	var out []runtime.Object
	for i := range count {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-e%d", node, i)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: events.DisruptionEvictionByEvictionAPI}}}})
	}
	return out
}

// staleMirror is what a stopped watcher left in KUBE: every node in its
// older version (rv 30), unmarked and schedulable, with the given counts.
func staleMirror(names []string, pods map[string]int) staticNodes {
	var out staticNodes
	for _, name := range names {
		s := stateFromNode(apiNode(name), pods[name])
		s.ResourceVersion = "30"
		out = append(out, s)
	}
	return out
}

func tenNodes() []string {
	names := []string{"a", "m1", "m2"}
	for i := range 7 {
		names = append(names, fmt.Sprintf("free-%d", i))
	}
	return names
}

// withAPIFleet makes the harness count the fleet from its fake API over mirror.
func (h *harness) withAPIFleet(mirror staticNodes) *harness {
	h.act.fleet = NewFleets(mirror, h.ledger, h.act.cfg.Policy, h.client, 0)
	return h
}

// TestActuatorCapHoldsAgainstTheAPI: the mirror is stale and shows none of
// the two marks the API holds; the cap (20 % of 10 = 2) must still refuse.
func TestActuatorCapHoldsAgainstTheAPI(t *testing.T) {
	objs := []runtime.Object{apiNode("a"), apiNode("m1", ours(EffectCordon)), apiNode("m2", ours(EffectCordon))}
	objs = append(objs, pods("a", 100)...)
	mirror := staleMirror(tenNodes(), map[string]int{"a": 100})
	for _, n := range tenNodes()[3:] {
		objs = append(objs, apiNode(n))
	}
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, objs...).withAPIFleet(mirror)
	a, _ := mirror.Node("a")
	if _, err := h.act.Apply(context.Background(), a, false, Evaluate(seedPolicy("cordon"), a, false)); err != nil {
		t.Fatal(err)
	}
	if got := h.node(t, "a"); got.Spec.Unschedulable || got.Labels[events.LabelAutoCordon] != "" {
		t.Fatal("a cordoned beyond the cap")
	}
	msgs := decisions(t, h.pub)
	if len(msgs) != 1 || msgs[0].D.Verb != VerbSkipped || msgs[0].D.Code != CodeCapReached || msgs[0].D.Held != 2 || msgs[0].D.Cap != 2 {
		t.Fatalf("published %+v", msgs)
	}
}

// TestActuatorLiveReapplyIsCapped: the mirror still shows a's mark (a
// "re-apply": uncordoned, label left), but in the API the mark is gone: on
// the live node that is a new cordon, and the cap applies.
func TestActuatorLiveReapplyIsCapped(t *testing.T) {
	objs := []runtime.Object{apiNode("a"), apiNode("m1", ours(EffectCordon)), apiNode("m2", ours(EffectCordon))}
	objs = append(objs, pods("a", 120)...)
	for _, n := range tenNodes()[3:] {
		objs = append(objs, apiNode(n))
	}
	mirror := staleMirror(tenNodes(), map[string]int{"a": 120})
	a, _ := mirror.Node("a")
	a.Labels = map[string]string{events.LabelAutoCordon: MarkLabelValue}
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{}, objs...).withAPIFleet(mirror)
	d := Evaluate(seedPolicy("cordon"), a, true)
	if d.Code != CodeReapply {
		t.Fatalf("mirror decision %s, want a re-apply", d.Code)
	}
	if _, err := h.act.Apply(context.Background(), a, true, d); err != nil {
		t.Fatal(err)
	}
	if got := h.node(t, "a"); got.Spec.Unschedulable || got.Labels[events.LabelAutoCordon] != "" {
		t.Fatal("live new cordon not capped")
	}
	if msgs := decisions(t, h.pub); len(msgs) != 1 || msgs[0].D.Code != CodeCapReached {
		t.Fatalf("published %+v", msgs)
	}
}

// TestActuatorLearnsLiveMarks: the re-verification finds opswire's mark on a
// node the mirror shows unmarked; the ledger counts it from then on.
func TestActuatorLearnsLiveMarks(t *testing.T) {
	n := apiNode("a", ours(EffectCordon))
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 95)...)...)
	stale := staticNodes{staleMirror([]string{"a"}, map[string]int{"a": 100})[0]}
	if _, err := h.act.Apply(context.Background(), stale[0], false, Evaluate(seedPolicy("cordon"), stale[0], false)); err != nil {
		t.Fatal(err)
	}
	if len(h.writes()) != 0 {
		t.Fatalf("wrote %v", h.writes())
	}
	if f := NewFleets(stale, h.ledger, seedPolicy("cordon"), nil, 0).Mirror(""); f.Marks != 1 {
		t.Fatalf("the mark found live is not counted: %+v", f)
	}
}

// TestActuatorHandsDrainedNodeOver: the drain rows of the decision table,
// through the actuator: the mark goes, the cordon stays, the handover is
// published and recorded.
func TestActuatorHandsDrainedNodeOver(t *testing.T) {
	tests := []struct {
		name                      string
		mirrorPods, mirrorEvicted int
		runningLive, evictingLive int
		wantVerb                  string
	}{
		{"drain seen by the mirror and live", 100, 60, 40, 60, VerbHandedOver},
		{"mirror says release, live shows the drain", 90, 0, 10, 80, VerbHandedOver},
		{"mirror saw the drain, the evicted pods are gone live", 100, 100, 0, 0, VerbHandedOver},
		{"a descheduler's evictions at minPods, done: released", 90, 0, 90, 0, VerbUncordoned},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := apiNode("a", ours(EffectCordon))
			objs := append([]runtime.Object{n}, pods("a", tc.runningLive)...)
			objs = append(objs, evictingPods("a", tc.evictingLive)...)
			h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, objs...)
			state := mirrorOf(n, tc.mirrorPods)
			state.Evicting = tc.mirrorEvicted
			d := Evaluate(seedPolicy("cordon"), state, true)
			if _, err := h.act.Apply(context.Background(), state, true, d); err != nil {
				t.Fatal(err)
			}
			got := h.node(t, "a")
			_, labelled := got.Labels[events.LabelAutoCordon]
			_, annotated := got.Annotations[events.AnnotationAutoCordon]
			if labelled || annotated {
				t.Fatalf("mark kept: %v %v", got.Labels, got.Annotations)
			}
			msgs := decisions(t, h.pub)
			if len(msgs) != 1 || msgs[0].D.Verb != tc.wantVerb {
				t.Fatalf("published %+v, want %s", msgs, tc.wantVerb)
			}
			if tc.wantVerb == VerbUncordoned {
				if got.Spec.Unschedulable {
					t.Fatal("not released")
				}
				return
			}
			if !got.Spec.Unschedulable {
				t.Fatal("the drained node was uncordoned")
			}
			if d := msgs[0].D; d.Action != string(ActionHandOver) || d.Code != CodeDrained || d.Severity != events.SeverityWarning ||
				!strings.HasPrefix(msgs[0].Subject, "ops.prod.cordon.handedover.") {
				t.Fatalf("handover message %+v on %s", d, msgs[0].Subject)
			}
			if ev := <-h.rec.Events; !strings.Contains(ev, EventHandedOver) {
				t.Fatalf("event %q", ev)
			}
			if v := testutil.ToFloat64(h.m.Handovers.WithLabelValues("false")); v != 1 {
				t.Fatalf("handovers metric %v", v)
			}
		})
	}
}

package cordon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opswire/opswire/shared/events"
)

// cordonedAt writes the mark of a cordon decided at pods with the node's
// departure totals at that moment (the baseline); nil: a mark without one.
func cordonedAt(pods int, base *Departures, effects ...string) nodeOpt {
	if len(effects) == 0 {
		effects = []string{EffectCordon}
	}
	return func(n *events.NodeState) {
		b, _ := json.Marshal(Mark{Effects: effects, Pods: pods, Departed: base})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[events.AnnotationAutoCordon] = string(b)
	}
}

// departed sets the node's departure totals (the watcher's).
func departed(all, evicted int) nodeOpt {
	return func(n *events.NodeState) { n.Departed, n.DepartedEvicted = all, evicted }
}

func base(all, evicted int) *Departures { return &Departures{Pods: all, Evicted: evicted} }

// TestEvaluatePacedDrain is the decision table of a drain paced by
// PodDisruptionBudgets: at minPods, a node opswire cordoned whose departures
// since the cordon were mostly evictions is handed over, not released. The
// seed policy: maxPods 100, minPods 90, drainEvictedPercent 50.
func TestEvaluatePacedDrain(t *testing.T) {
	pol := withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 50 })
	tests := []struct {
		name   string
		policy Policy
		node   *events.NodeState
		action Action
		code   string
	}{
		{"paced drain: every departure an eviction", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 10)), ActionHandOver, CodeDrained},
		{"paced drain, totals counted long before the cordon", pol, node(90, unschedulable, cordonedAt(100, base(500, 300)), departed(510, 310)), ActionHandOver, CodeDrained},
		{"exactly half the departures evictions", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 5)), ActionHandOver, CodeDrained},
		{"2 of 2 departures evictions", pol, node(90, unschedulable, cordonedAt(92, base(7, 0)), departed(9, 2)), ActionHandOver, CodeDrained},
		{"below min, paced drain", pol, node(3, unschedulable, cordonedAt(100, base(0, 0)), departed(97, 97)), ActionHandOver, CodeDrained},
		{"scale-down: plain deletes", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 0)), ActionUncordon, CodeMinReached},
		{"one eviction since the cordon is enough", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 1)), ActionHandOver, CodeDrained},
		{"the only departure an eviction", pol, node(90, unschedulable, cordonedAt(91, base(0, 0)), departed(1, 1)), ActionHandOver, CodeDrained},
		{"less than half evictions", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 4)), ActionHandOver, CodeDrained},
		{"evictions before the cordon do not count", pol, node(90, unschedulable, cordonedAt(100, base(20, 20)), departed(30, 20)), ActionUncordon, CodeMinReached},
		{"a re-cordon starts from its own baseline", pol, node(90, unschedulable, cordonedAt(92, base(10, 10)), departed(12, 10)), ActionUncordon, CodeMinReached},
		{"departures the totals missed count as not evicted, the evictions still hand over", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(3, 3)), ActionHandOver, CodeDrained},
		{"... and do not hide a drain", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(5, 5)), ActionHandOver, CodeDrained},
		{"mark without a baseline (older opswire): released", pol, node(90, unschedulable, cordonedAt(100, nil), departed(10, 10)), ActionUncordon, CodeMinReached},
		{"totals went backwards (KUBE lost the state): released", pol, node(90, unschedulable, cordonedAt(100, base(50, 40)), departed(3, 3)), ActionUncordon, CodeMinReached},
		{"more evictions than departures: unknown, released", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(2, 5)), ActionUncordon, CodeMinReached},
		{"between the bounds: hold (decided at the release only)", pol, node(95, unschedulable, cordonedAt(100, base(0, 0)), departed(5, 5)), ActionNone, CodeHolding},
		{"recognition off", withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 0 }),
			node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 10)), ActionUncordon, CodeMinReached},
		{"threshold 100%", withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 100 }),
			node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 9)), ActionHandOver, CodeDrained},
		{"a person uncordoned, left the label: released", pol, node(90, cordonedAt(100, base(0, 0)), departed(10, 10)), ActionUncordon, CodeMinReached},
		{"taint mode: opswire lifts its taint, the drain's cordon stays", withPolicy("taint", func(p *Policy) { p.DrainEvictedPercent = 50 }),
			node(90, unschedulable, tainted(events.LabelAutoCordon), cordonedAt(100, base(0, 0), EffectTaint), departed(10, 10)), ActionUncordon, CodeMinReached},
		{"donotcordon beats it", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 10), withLabel(events.LabelDoNotCordon, "")), ActionNone, CodeDoNotCordonHeld},
		{"the at-once rule still holds between the bounds", pol, node(95, unschedulable, evicting(60), cordonedAt(100, base(0, 0)), departed(5, 0)), ActionHandOver, CodeDrained},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Evaluate(tc.policy, tc.node, true)
			if d.Action != tc.action || d.Code != tc.code {
				t.Fatalf("Evaluate = %s/%s (%s), want %s/%s", d.Action, d.Code, d.Reason, tc.action, tc.code)
			}
			if d.Departed != tc.node.Departed || d.DepartedEvicted != tc.node.DepartedEvicted {
				t.Fatalf("decision lacks the departure totals: %+v", d)
			}
		})
	}
	d := Evaluate(pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 8)), true)
	if !strings.Contains(d.Reason, "8 of the 10 pods that left") || !strings.Contains(d.Reason, "until a person uncordons") {
		t.Fatalf("reason %q", d.Reason)
	}
}

// TestCordonPatchRecordsDepartures: the cordon's mark records the departure
// totals the decision saw, the baseline of a later paced-drain decision; a
// re-apply records the new ones.
func TestCordonPatchRecordsDepartures(t *testing.T) {
	nd := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7"}}
	for _, totals := range [][2]int{{0, 0}, {42, 17}} {
		b, m, err := cordonPatch(seedPolicy("cordon"), nd, Decision{Action: ActionCordon, Pods: 100, Departed: totals[0], DepartedEvicted: totals[1]}, time.Now(), "r1")
		if err != nil {
			t.Fatal(err)
		}
		if m.Departed == nil || *m.Departed != (Departures{Pods: totals[0], Evicted: totals[1]}) {
			t.Fatalf("mark baseline %+v, want %v", m.Departed, totals)
		}
		var p struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		got, ok := readMark(p.Metadata.Annotations)
		if !ok || got.Departed == nil || *got.Departed != *m.Departed {
			t.Fatalf("patched annotation %q lacks the baseline", p.Metadata.Annotations[events.AnnotationAutoCordon])
		}
		nd.Annotations = p.Metadata.Annotations // the re-apply reads the old mark
	}
}

// TestActuatorHandsPacedDrainOver: at minPods the mirror's departure totals
// since the live mark's baseline say "paced drain": the actuator's live
// re-check (the evicted pods are gone from the API, so it reuses the
// mirror's totals against the live mark) agrees, and the node is handed
// over, not released. Plain deletes are released as before.
func TestActuatorHandsPacedDrainOver(t *testing.T) {
	pol := withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 50 })
	markWith := func(b Departures) func(*corev1.Node) {
		return func(n *corev1.Node) {
			ours(EffectCordon)(n)
			m, _ := readMark(n.Annotations)
			m.Pods, m.Departed = 100, &b
			raw, _ := json.Marshal(m)
			n.Annotations[events.AnnotationAutoCordon] = string(raw)
		}
	}
	tests := []struct {
		name              string
		liveBase          Departures
		totals, evicted   int
		wantVerb          string
		wantUnschedulable bool
	}{
		{"paced drain", Departures{}, 10, 10, VerbHandedOver, true},
		{"scale-down", Departures{}, 10, 0, VerbUncordoned, false},
		// agree's drain exception: of a handover and a release, the handover
		// only removes the mark, so the mirror's handover stands.
		{"live baseline disagrees: the handover, the safer write, stands", Departures{Pods: 8, Evicted: 8}, 10, 10, VerbHandedOver, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := apiNode("a", markWith(tc.liveBase))
			h := newHarness(t, pol, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 90)...)...)
			// The mirror saw the mark with a zero baseline.
			state := stateFromNode(apiNode("a", markWith(Departures{})), 90)
			state.Departed, state.DepartedEvicted = tc.totals, tc.evicted
			d := Evaluate(pol, state, true)
			if _, err := h.act.Apply(context.Background(), state, true, d); err != nil {
				t.Fatal(err)
			}
			msgs := decisions(t, h.pub)
			if len(msgs) != 1 || msgs[0].D.Verb != tc.wantVerb {
				t.Fatalf("published %+v, want %s", msgs, tc.wantVerb)
			}
			if got := h.node(t, "a"); got.Spec.Unschedulable != tc.wantUnschedulable || cordonLabelled(got) {
				t.Fatalf("node after %s: unschedulable %v, labels %v", tc.wantVerb, got.Spec.Unschedulable, got.Labels)
			}
		})
	}
}

func cordonLabelled(n *corev1.Node) bool { _, ok := n.Labels[events.LabelAutoCordon]; return ok }

// TestActuatorDryRunSeesPacedDrain: a dry run decides a paced drain as a
// real run would: its simulated cordon carries the mark (with the departure
// baseline) the real cordon would write, so at minPods it says "handover"
// for a paced drain and "uncordon" for a scale-down.
func TestActuatorDryRunSeesPacedDrain(t *testing.T) {
	pol := withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 50 })
	for _, tc := range []struct {
		name    string
		evicted int
		want    Action
	}{
		{"paced drain", 10, ActionHandOver},
		{"scale-down", 0, ActionUncordon},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := apiNode("a")
			h := newHarness(t, pol, true, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
			apply := func(s *events.NodeState) {
				t.Helper()
				s, marked := h.ledger.View(pol, s)
				if _, err := h.act.Apply(context.Background(), s, marked, Evaluate(pol, s, marked)); err != nil {
					t.Fatal(err)
				}
			}
			state := mirrorOf(n, 100)
			state.Departed, state.DepartedEvicted = 40, 5 // totals from before the cordon
			apply(state)
			for i := 90; i < 100; i++ { // ten pods leave
				if err := h.client.CoreV1().Pods("default").Delete(context.Background(), fmt.Sprintf("a-p%d", i), metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			state = mirrorOf(n, 90)
			state.Departed, state.DepartedEvicted = 50, 5+tc.evicted
			apply(state)
			msgs := decisions(t, h.pub)
			if len(msgs) != 2 || msgs[0].D.Action != string(ActionCordon) || msgs[1].D.Action != string(tc.want) || !msgs[1].D.DryRun {
				t.Fatalf("dry run published %+v, want a cordon then a %s", msgs, tc.want)
			}
		})
	}
}

// streak sets the node's recent departures (NodeState.EvictionStreak) and
// its departures of unknown final state.
func streak(n, unknown int) nodeOpt {
	return func(s *events.NodeState) { s.EvictionStreak, s.DepartedUnknown = n, unknown }
}

// TestEvaluateDrainStreak: at minPods, a node opswire cordoned whose last
// departures are at least two evictions, or departures the watcher never saw
// the final state of (a drain while no watcher ran), is handed over however
// many plain departures came before them; a streak from before the cordon
// counts only as far as the departures since the cordon.
func TestEvaluateDrainStreak(t *testing.T) {
	pol := withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 50 })
	tests := []struct {
		name   string
		policy Policy
		node   *events.NodeState
		action Action
		code   string
	}{
		{"plain departures, then a paced drain: 4 of 9", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(9, 4), streak(4, 0)), ActionHandOver, CodeDrained},
		{"drain while no watcher ran: all unknown", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 0), streak(10, 10)), ActionHandOver, CodeDrained},
		{"an eviction and an unknown departure", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 1), streak(2, 1)), ActionHandOver, CodeDrained},
		{"one eviction last: an eviction since the cordon", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 1), streak(1, 0)), ActionHandOver, CodeDrained},
		{"evictions, then plain deletes: evictions since the cordon", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 4), streak(0, 0)), ActionHandOver, CodeDrained},
		{"a streak from before the cordon counts since the cordon (its one eviction hands over)", pol, node(90, unschedulable, cordonedAt(91, base(20, 20)), departed(21, 21), streak(21, 0)), ActionHandOver, CodeDrained},
		{"mark without a baseline: the streak alone", pol, node(90, unschedulable, cordonedAt(100, nil), departed(10, 3), streak(3, 0)), ActionHandOver, CodeDrained},
		{"between the bounds: hold", pol, node(95, unschedulable, cordonedAt(100, base(0, 0)), departed(5, 5), streak(5, 0)), ActionNone, CodeHolding},
		{"recognition off", withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 0 }),
			node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 4), streak(4, 0)), ActionUncordon, CodeMinReached},
		{"a person uncordoned, left the label: released", pol, node(90, cordonedAt(100, base(0, 0)), departed(10, 4), streak(4, 0)), ActionUncordon, CodeMinReached},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Evaluate(tc.policy, tc.node, true)
			if d.Action != tc.action || d.Code != tc.code {
				t.Fatalf("Evaluate = %s/%s (%s), want %s/%s", d.Action, d.Code, d.Reason, tc.action, tc.code)
			}
		})
	}
	d := Evaluate(pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 0), streak(10, 10)), true)
	if !strings.Contains(d.Reason, "the last 10 pods that left") || !strings.Contains(d.Reason, "10 departures of unknown final state") {
		t.Fatalf("reason %q", d.Reason)
	}
}

package cordon

import (
	"strings"
	"testing"

	"github.com/opswire/opswire/shared/events"
)

// TestEvaluateAnyEvictionSinceTheCordonHandsOver is the decision table of a
// node opswire cordoned that falls to minPods after pods left it through the
// Eviction API (issue 36, item 2): a drain slowed by PodDisruptionBudgets
// need not be "mostly" evictions, or a streak, to be a drain, and a node must
// never be released while one of its pods is being evicted. The seed policy:
// maxPods 100, minPods 90, drainEvictedPercent 50.
func TestEvaluateAnyEvictionSinceTheCordonHandsOver(t *testing.T) {
	pol := withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 50 })
	taint := withPolicy("taint", func(p *Policy) { p.DrainEvictedPercent = 50 })
	tests := []struct {
		name   string
		policy Policy
		node   *events.NodeState
		action Action
		code   string
	}{
		// (a) a Job's pod completed between two evictions of a paced drain,
		// after a scale-down since the cordon: evict, evict, plain, evict.
		{"paced drain with a completion in it, after a scale-down", pol,
			node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 3), streak(1, 0)), ActionHandOver, CodeDrained},
		// (b) the drain starts at minPods + 1: its first eviction reaches minPods.
		{"drain starting at minPods + 1, first eviction", pol,
			node(90, unschedulable, cordonedAt(91, base(0, 0)), departed(1, 1), streak(1, 0)), ActionHandOver, CodeDrained},
		{"a descheduler's single eviction also hands over", pol,
			node(90, unschedulable, cordonedAt(100, base(4, 0)), departed(14, 1), streak(0, 0)), ActionHandOver, CodeDrained},
		{"an eviction in flight at minPods hands over", pol,
			node(90, unschedulable, evicting(1), cordonedAt(100, base(0, 0)), departed(10, 0)), ActionHandOver, CodeDrained},
		{"an eviction in flight, no baseline in the mark: hands over", pol,
			node(90, unschedulable, evicting(1), cordonedAt(100, nil), departed(10, 0)), ActionHandOver, CodeDrained},
		{"taint mode, eviction in flight: held, not released", taint,
			node(90, unschedulable, evicting(1), tainted(events.LabelAutoCordon), cordonedAt(100, base(0, 0), EffectTaint), departed(10, 1)), ActionNone, CodeEvictionInFlight},
		{"recognition off, eviction in flight: held, not released", withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 0 }),
			node(90, unschedulable, evicting(1), cordonedAt(100, base(0, 0)), departed(10, 0)), ActionNone, CodeEvictionInFlight},
		{"a person uncordoned, eviction in flight: held, not released", pol,
			node(90, evicting(1), cordonedAt(100, base(0, 0)), departed(10, 0)), ActionNone, CodeEvictionInFlight},
		// What still releases.
		{"plain departures only", pol, node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 0)), ActionUncordon, CodeMinReached},
		{"evictions before the cordon only", pol, node(90, unschedulable, cordonedAt(100, base(20, 20)), departed(30, 20)), ActionUncordon, CodeMinReached},
		{"taint mode: opswire lifts its taint, the drain's cordon stays", taint,
			node(90, unschedulable, tainted(events.LabelAutoCordon), cordonedAt(100, base(0, 0), EffectTaint), departed(10, 1)), ActionUncordon, CodeMinReached},
		{"recognition off", withPolicy("cordon", func(p *Policy) { p.DrainEvictedPercent = 0 }),
			node(90, unschedulable, cordonedAt(100, base(0, 0)), departed(10, 1)), ActionUncordon, CodeMinReached},
		{"between the bounds, one eviction: hold", pol, node(95, unschedulable, cordonedAt(100, base(0, 0)), departed(5, 1)), ActionNone, CodeHolding},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Evaluate(tc.policy, tc.node, true)
			if d.Action != tc.action || d.Code != tc.code {
				t.Fatalf("Evaluate = %s/%s (%s), want %s/%s", d.Action, d.Code, d.Reason, tc.action, tc.code)
			}
		})
	}
	d := Evaluate(pol, node(90, unschedulable, cordonedAt(100, base(4, 0)), departed(14, 1)), true)
	for _, s := range []string{"1 pod(s) left the node through the Eviction API since opswire cordoned it", "descheduler", "until a person uncordons"} {
		if !strings.Contains(d.Reason, s) {
			t.Fatalf("reason %q does not say %q", d.Reason, s)
		}
	}
}

package cordon

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

func seedPolicy(mode string) Policy {
	return Policy{MaxPods: 100, MinPods: 90, Mode: mode, TaintKey: events.LabelAutoCordon,
		Selector: labels.Everything(), MaxCordonedPercent: 20, CapCounts: config.CapCountsUnavailable,
		AlwaysCountTaintKeys: []string{config.TaintClusterAutoscalerToBeDeleted}, DrainEvictingPercent: 50}
}

func withPolicy(mode string, edit func(*Policy)) Policy {
	p := seedPolicy(mode)
	edit(&p)
	return p
}

type nodeOpt func(*events.NodeState)

func node(pods int, opts ...nodeOpt) *events.NodeState {
	n := &events.NodeState{Name: "n1", UID: "u1", ResourceVersion: "7", Pods: pods, AllocatablePods: 110,
		Labels: map[string]string{"kubernetes.io/hostname": "n1"}}
	for _, o := range opts {
		o(n)
	}
	return n
}

func withLabel(k, v string) nodeOpt     { return func(n *events.NodeState) { n.Labels[k] = v } }
func unschedulable(n *events.NodeState) { n.Unschedulable = true }
func tainted(key string) nodeOpt        { return taintedWith(key, "", "NoSchedule") }
func taintedWith(key, value, effect string) nodeOpt {
	return func(n *events.NodeState) {
		n.Taints = append(n.Taints, events.Taint{Key: key, Value: value, Effect: effect})
	}
}
func evicting(k int) nodeOpt { return func(n *events.NodeState) { n.Evicting = k } }

// withMark writes opswire's annotation listing the effects it applied.
func withMark(effects ...string) nodeOpt {
	return func(n *events.NodeState) {
		b, _ := json.Marshal(Mark{Effects: effects})
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[events.AnnotationAutoCordon] = string(b)
	}
}

func TestEvaluate(t *testing.T) {
	const mark = events.LabelAutoCordon
	tests := []struct {
		name   string
		policy Policy
		node   *events.NodeState
		marked bool
		action Action
		code   string
	}{
		// counts × unmarked, cordon mode
		{"unmarked below max", seedPolicy("cordon"), node(99), false, ActionNone, CodeBelowMax},
		{"unmarked at max", seedPolicy("cordon"), node(100), false, ActionCordon, CodeMaxReached},
		{"unmarked above max", seedPolicy("cordon"), node(150), false, ActionCordon, CodeMaxReached},
		{"unmarked at min", seedPolicy("cordon"), node(90), false, ActionNone, CodeBelowMax},
		{"unmarked empty", seedPolicy("cordon"), node(0), false, ActionNone, CodeBelowMax},
		// counts × marked (hysteresis)
		{"marked at max, cordoned", seedPolicy("cordon"), node(100, unschedulable), true, ActionNone, CodeHolding},
		{"marked between bounds", seedPolicy("cordon"), node(95, unschedulable), true, ActionNone, CodeHolding},
		{"marked just above min", seedPolicy("cordon"), node(91, unschedulable), true, ActionNone, CodeHolding},
		{"marked at min", seedPolicy("cordon"), node(90, unschedulable), true, ActionUncordon, CodeMinReached},
		{"marked below min", seedPolicy("cordon"), node(3, unschedulable), true, ActionUncordon, CodeMinReached},
		{"marked, effect removed by a person, over max", seedPolicy("cordon"), node(120), true, ActionCordon, CodeReapply},
		{"marked, effect removed, between bounds", seedPolicy("cordon"), node(95), true, ActionNone, CodeHolding},
		// labels
		{"donotcordon over max", seedPolicy("cordon"), node(200, withLabel(events.LabelDoNotCordon, "")), false, ActionNone, CodeDoNotCordon},
		{"donotcordon beats our own mark", seedPolicy("cordon"), node(0, withLabel(events.LabelDoNotCordon, "yes"), unschedulable), true, ActionNone, CodeDoNotCordonHeld},
		{"control plane excluded", seedPolicy("cordon"), node(200, withLabel(events.LabelControlPlane, "")), false, ActionNone, CodeUnmanaged},
		{"legacy master excluded", seedPolicy("cordon"), node(200, withLabel(events.LabelMaster, "")), false, ActionNone, CodeUnmanaged},
		{"control plane included", func() Policy { p := seedPolicy("cordon"); p.IncludeControlPlane = true; return p }(),
			node(200, withLabel(events.LabelControlPlane, "")), false, ActionCordon, CodeMaxReached},
		{"outside nodeSelector", func() Policy {
			p := seedPolicy("cordon")
			p.Selector = labels.SelectorFromSet(labels.Set{"pool": "web"})
			return p
		}(),
			node(200), false, ActionNone, CodeUnmanaged},
		{"inside nodeSelector", func() Policy {
			p := seedPolicy("cordon")
			p.Selector = labels.SelectorFromSet(labels.Set{"pool": "web"})
			return p
		}(),
			node(200, withLabel("pool", "web")), false, ActionCordon, CodeMaxReached},
		{"outside nodeSelector but ours: still released", func() Policy {
			p := seedPolicy("cordon")
			p.Selector = labels.SelectorFromSet(labels.Set{"pool": "web"})
			return p
		}(),
			node(10, unschedulable), true, ActionUncordon, CodeMinReached},
		{"outside nodeSelector and ours, effect removed: not re-applied", func() Policy {
			p := seedPolicy("cordon")
			p.Selector = labels.SelectorFromSet(labels.Set{"pool": "web"})
			return p
		}(),
			node(200), true, ActionNone, CodeHolding},
		// someone else's cordon or taint
		{"cordoned by a person", seedPolicy("cordon"), node(200, unschedulable), false, ActionNone, CodeHeldByOther},
		{"tainted with our key by a person", seedPolicy("cordon"), node(200, tainted(mark)), false, ActionNone, CodeHeldByOther},
		{"person's cordon, low count: never uncordoned", seedPolicy("cordon"), node(0, unschedulable), false, ActionNone, CodeBelowMax},
		// the seed's taint rule: a node a person tainted, without opswire's label, is left alone
		{"person's maintenance taint", seedPolicy("cordon"), node(100, taintedWith("maintenance", "true", "NoSchedule")), false, ActionNone, CodeTainted},
		{"person's NoExecute taint", seedPolicy("cordon"), node(100, taintedWith("maintenance", "", "NoExecute")), false, ActionNone, CodeTainted},
		{"person's PreferNoSchedule taint counts too", seedPolicy("cordon"), node(100, taintedWith("maintenance", "", "PreferNoSchedule")), false, ActionNone, CodeTainted},
		{"placement taint counts by default", seedPolicy("cordon"), node(200, taintedWith("dedicated", "gpu", "NoSchedule")), false, ActionNone, CodeTainted},
		{"ignored placement taint does not block", withPolicy("cordon", func(p *Policy) { p.IgnoreTaintKeys = []string{"dedicated"} }),
			node(200, taintedWith("dedicated", "gpu", "NoSchedule")), false, ActionCordon, CodeMaxReached},
		{"ignored prefix", withPolicy("cordon", func(p *Policy) { p.IgnoreTaintKeys = []string{"example.com/*"} }),
			node(200, tainted("example.com/pool")), false, ActionCordon, CodeMaxReached},
		{"ignored prefix, other key still counts", withPolicy("cordon", func(p *Policy) { p.IgnoreTaintKeys = []string{"example.com/*"} }),
			node(200, tainted("example.com/pool"), tainted("maintenance")), false, ActionNone, CodeTainted},
		{"Kubernetes' node.kubernetes.io taint is not a person's", seedPolicy("cordon"), node(100, taintedWith("node.kubernetes.io/not-ready", "", "NoExecute")), false, ActionCordon, CodeMaxReached},
		{"cloud provider's taint is not a person's", seedPolicy("cordon"), node(100, tainted("node.cloudprovider.kubernetes.io/uninitialized")), false, ActionCordon, CodeMaxReached},
		{"cluster-autoscaler's deletion taint always counts", withPolicy("cordon", func(p *Policy) { p.IgnoreTaintKeys = []string{"*"} }),
			node(100, taintedWith(config.TaintClusterAutoscalerToBeDeleted, "1700000000", "NoSchedule")), false, ActionNone, CodeTainted},
		{"always-count beats the Kubernetes prefix", withPolicy("cordon", func(p *Policy) { p.AlwaysCountTaintKeys = []string{"node.kubernetes.io/out-of-service"} }),
			node(100, taintedWith("node.kubernetes.io/out-of-service", "", "NoExecute")), false, ActionNone, CodeTainted},
		{"ignore everything", withPolicy("cordon", func(p *Policy) { p.IgnoreTaintKeys, p.AlwaysCountTaintKeys = []string{"*"}, nil }),
			node(100, tainted("maintenance")), false, ActionCordon, CodeMaxReached},
		{"person's taint below max: nothing anyway", seedPolicy("cordon"), node(50, tainted("maintenance")), false, ActionNone, CodeBelowMax},
		{"marked, tainted later by a person: still released at min", seedPolicy("cordon"), node(90, unschedulable, tainted("maintenance")), true, ActionUncordon, CodeMinReached},
		// drains: a node opswire cordoned that a person drains is handed over
		{"drain: every pod evicting", seedPolicy("cordon"), node(100, unschedulable, evicting(100)), true, ActionHandOver, CodeDrained},
		{"drain: half the pods evicting", seedPolicy("cordon"), node(100, unschedulable, evicting(50), withMark(EffectCordon)), true, ActionHandOver, CodeDrained},
		{"drain beats the release at min", seedPolicy("cordon"), node(40, unschedulable, evicting(38)), true, ActionHandOver, CodeDrained},
		{"drain at the very end (2 of 2 left)", seedPolicy("cordon"), node(2, unschedulable, evicting(2)), true, ActionHandOver, CodeDrained},
		{"one eviction is not a drain", seedPolicy("cordon"), node(100, unschedulable, evicting(1)), true, ActionNone, CodeHolding},
		{"the only pod evicted is not a drain, nor released while it is", seedPolicy("cordon"), node(1, unschedulable, evicting(1)), true, ActionNone, CodeEvictionInFlight},
		{"a descheduler's few evictions are not a drain", seedPolicy("cordon"), node(100, unschedulable, evicting(10)), true, ActionNone, CodeHolding},
		{"a descheduler's eviction at min: held while in flight", seedPolicy("cordon"), node(90, unschedulable, evicting(5)), true, ActionNone, CodeEvictionInFlight},
		{"drain recognition off", withPolicy("cordon", func(p *Policy) { p.DrainEvictingPercent = 0 }),
			node(90, unschedulable, evicting(90)), true, ActionNone, CodeEvictionInFlight},
		{"drain recognition off, evictions done", withPolicy("cordon", func(p *Policy) { p.DrainEvictingPercent = 0 }),
			node(90, unschedulable), true, ActionUncordon, CodeMinReached},
		{"drain threshold 100%", withPolicy("cordon", func(p *Policy) { p.DrainEvictingPercent = 100 }),
			node(100, unschedulable, evicting(99)), true, ActionNone, CodeHolding},
		{"evictions on a node that is no longer cordoned: normal rules", seedPolicy("cordon"), node(120, evicting(120)), true, ActionCordon, CodeReapply},
		{"drain of an unmarked node: not ours", seedPolicy("cordon"), node(100, unschedulable, evicting(100)), false, ActionNone, CodeHeldByOther},
		{"taint mode: no release while the drain's evictions are in flight", seedPolicy("taint"),
			node(90, unschedulable, tainted(mark), evicting(90), withMark(EffectTaint)), true, ActionNone, CodeEvictionInFlight},
		{"taint mode: the drain's own cordon stays, opswire lifts its taint once they are done", seedPolicy("taint"),
			node(90, unschedulable, tainted(mark), withMark(EffectTaint)), true, ActionUncordon, CodeMinReached},
		{"mode switched to taint, mark lists the cordon: handed over", seedPolicy("taint"),
			node(100, unschedulable, evicting(100), withMark(EffectCordon)), true, ActionHandOver, CodeDrained},
		{"donotcordon beats a drain", seedPolicy("cordon"), node(100, unschedulable, evicting(100), withLabel(events.LabelDoNotCordon, "")), true, ActionNone, CodeDoNotCordonHeld},
		// taint mode
		{"taint mode at max", seedPolicy("taint"), node(100), false, ActionCordon, CodeMaxReached},
		{"taint mode, person cordoned", seedPolicy("taint"), node(100, unschedulable), false, ActionNone, CodeHeldByOther},
		{"taint mode, marked and tainted", seedPolicy("taint"), node(100, tainted(mark)), true, ActionNone, CodeHolding},
		{"taint mode, marked, taint removed", seedPolicy("taint"), node(100), true, ActionCordon, CodeReapply},
		{"taint mode, marked at min", seedPolicy("taint"), node(90, tainted(mark)), true, ActionUncordon, CodeMinReached},
		// percentage thresholds (110 allocatable: max ceil(99)=99, min floor(88)=88)
		{"percent at max", func() Policy { p := seedPolicy("cordon"); p.MaxPodsPercent, p.MinPodsPercent = 90, 80; return p }(),
			node(99), false, ActionCordon, CodeMaxReached},
		{"percent below max", func() Policy { p := seedPolicy("cordon"); p.MaxPodsPercent, p.MinPodsPercent = 90, 80; return p }(),
			node(98), false, ActionNone, CodeBelowMax},
		{"percent at min", func() Policy { p := seedPolicy("cordon"); p.MaxPodsPercent, p.MinPodsPercent = 90, 80; return p }(),
			node(88, unschedulable), true, ActionUncordon, CodeMinReached},
		{"percent without allocatable", func() Policy { p := seedPolicy("cordon"); p.MaxPodsPercent = 90; return p }(),
			node(500, func(n *events.NodeState) { n.AllocatablePods = 0 }), false, ActionNone, CodeAllocatableAbsent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Evaluate(tc.policy, tc.node, tc.marked)
			if d.Action != tc.action || d.Code != tc.code {
				t.Fatalf("Evaluate = %s/%s (%s), want %s/%s", d.Action, d.Code, d.Reason, tc.action, tc.code)
			}
			if d.Pods != tc.node.Pods || d.Reason == "" {
				t.Fatalf("decision lacks its numbers: %+v", d)
			}
		})
	}
}

func TestThresholds(t *testing.T) {
	tests := []struct {
		name             string
		maxPct, minPct   float64
		alloc            int64
		wantMax, wantMin int
		ok               bool
	}{
		{"absolute", 0, 0, 110, 100, 90, true},
		{"percent rounds max up, min down", 90, 80, 110, 99, 88, true},
		{"tiny node keeps a band", 50, 45, 2, 1, 0, true},
		{"band never collapses", 100, 99, 10, 10, 9, true},
		{"no allocatable", 90, 80, 0, 0, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := seedPolicy("cordon")
			p.MaxPodsPercent, p.MinPodsPercent = tc.maxPct, tc.minPct
			mx, mn, ok := p.Thresholds(&events.NodeState{AllocatablePods: tc.alloc})
			if mx != tc.wantMax || mn != tc.wantMin || ok != tc.ok {
				t.Fatalf("Thresholds = %d, %d, %v; want %d, %d, %v", mx, mn, ok, tc.wantMax, tc.wantMin, tc.ok)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	cordon := Decision{Action: ActionCordon, Code: CodeMaxReached, Reason: "x", Pods: 100, MaxPods: 100, MinPods: 90}
	uncordon := Decision{Action: ActionUncordon, Code: CodeMinReached, Reason: "x"}
	caps := func(nodes int, pct float64) Policy {
		p := seedPolicy("cordon")
		p.MaxCordonedNodes, p.MaxCordonedPercent = nodes, pct
		return p
	}
	tests := []struct {
		name    string
		policy  Policy
		d       Decision
		marked  bool
		fleet   Fleet
		admit   bool
		wantCap string
	}{
		{"default 20% of 10: first", caps(0, 20), cordon, false, Fleet{Held: 0, Managed: 10}, true, ""},
		{"default 20% of 10: second", caps(0, 20), cordon, false, Fleet{Held: 1, Managed: 10}, true, ""},
		{"default 20% of 10: third refused", caps(0, 20), cordon, false, Fleet{Held: 2, Managed: 10}, false, "maxCordonedPercent"},
		{"20% of 4 allows at least one", caps(0, 20), cordon, false, Fleet{Held: 0, Managed: 4}, true, ""},
		{"20% of 4: the second refused", caps(0, 20), cordon, false, Fleet{Held: 1, Managed: 4}, false, "at least 1"},
		{"seed config on 3 nodes: one", caps(0, 20), cordon, false, Fleet{Held: 0, Managed: 3}, true, ""},
		{"a single managed node: one", caps(0, 20), cordon, false, Fleet{Held: 0, Managed: 1}, true, ""},
		{"capacity already out of service counts", caps(0, 20), cordon, false, Fleet{Held: 2, Marks: 0, Managed: 10}, false, "out of service"},
		{"only marks counted", func() Policy { p := caps(0, 20); p.CapCounts = config.CapCountsMarks; return p }(),
			cordon, false, Fleet{Held: 2, Marks: 2, Managed: 10}, false, "opswire already holds 2"},
		{"live reapply on an unmarked node is a new cordon: capped", caps(0, 20),
			Decision{Action: ActionCordon, Code: CodeMaxReached, Reason: "x"}, false, Fleet{Held: 2, Managed: 10}, false, "maxCordonedPercent"},
		{"handover is never capped", caps(1, 1), Decision{Action: ActionHandOver, Code: CodeDrained}, true, Fleet{Held: 9, Managed: 10}, true, ""},
		{"absolute cap tighter than percent", caps(1, 50), cordon, false, Fleet{Held: 1, Managed: 10}, false, "maxCordonedNodes"},
		{"percent tighter than absolute", caps(5, 10), cordon, false, Fleet{Held: 1, Managed: 10}, false, "maxCordonedPercent"},
		{"no caps at all", caps(0, 0), cordon, false, Fleet{Held: 500, Managed: 10}, true, ""},
		{"re-apply on a held node is never capped", caps(0, 20), cordon, true, Fleet{Held: 9, Managed: 10}, true, ""},
		{"uncordon is never capped", caps(1, 1), uncordon, true, Fleet{Held: 9, Managed: 10}, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := Admit(tc.policy, tc.d, tc.marked, tc.fleet)
			if ok != tc.admit {
				t.Fatalf("Admit = %v (%s), want %v", ok, d.Reason, tc.admit)
			}
			if ok && d != tc.d {
				t.Fatalf("admitted decision changed: %+v", d)
			}
			if !ok {
				if d.Code != CodeCapReached || !contains(d.Reason, tc.wantCap) {
					t.Fatalf("refusal %q (%s) does not name %s", d.Reason, d.Code, tc.wantCap)
				}
			}
		})
	}
}

func TestManaged(t *testing.T) {
	c := config.Default().AutoCordon
	c.NodeSelector = "pool in (web,api),!spot"
	p := NewPolicy(c)
	tests := []struct {
		name string
		node *events.NodeState
		want bool
	}{
		{"selected", node(0, withLabel("pool", "web")), true},
		{"excluded by !spot", node(0, withLabel("pool", "web"), withLabel("spot", "")), false},
		{"other pool", node(0, withLabel("pool", "db")), false},
		{"selected control plane", node(0, withLabel("pool", "api"), withLabel(events.LabelControlPlane, "")), false},
		{"selected donotcordon", node(0, withLabel("pool", "api"), withLabel(events.LabelDoNotCordon, "")), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Managed(tc.node); got != tc.want {
				t.Fatalf("Managed = %v, want %v", got, tc.want)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

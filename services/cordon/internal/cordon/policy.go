package cordon

import (
	"math"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// Effects opswire can put on a node; the mark annotation lists the ones it applied.
const (
	EffectCordon = config.CordonModeCordon // spec.unschedulable = true
	EffectTaint  = config.CordonModeTaint  // a NoSchedule taint with Policy.TaintKey
)

// Policy is the autoCordon section turned into what decisions need.
type Policy struct {
	MaxPods, MinPods               int
	MaxPodsPercent, MinPodsPercent float64
	Mode                           string
	TaintKey                       string
	Selector                       labels.Selector
	IncludeControlPlane            bool
	MaxCordonedNodes               int
	MaxCordonedPercent             float64
}

// NewPolicy builds the policy of a validated autoCordon section.
func NewPolicy(c config.AutoCordon) Policy {
	return Policy{
		MaxPods: c.MaxPods, MinPods: c.MinPods,
		MaxPodsPercent: c.MaxPodsPercent, MinPodsPercent: c.MinPodsPercent,
		Mode: c.Mode, TaintKey: c.TaintKey,
		Selector: c.Selector(), IncludeControlPlane: c.IncludeControlPlane,
		MaxCordonedNodes: c.MaxCordonedNodes, MaxCordonedPercent: c.MaxCordonedPercent,
	}
}

// Thresholds returns the node's high and low water marks. With percentages
// they are shares of the node's allocatable pods: the high mark rounds up and
// the low mark down, so the band between them never collapses. ok is false
// when a percentage is configured but the node reports no allocatable pods.
func (p Policy) Thresholds(n *events.NodeState) (maxPods, minPods int, ok bool) {
	if p.MaxPodsPercent <= 0 {
		return p.MaxPods, p.MinPods, true
	}
	if n.AllocatablePods <= 0 {
		return 0, 0, false
	}
	alloc := float64(n.AllocatablePods)
	maxPods = int(math.Ceil(alloc * p.MaxPodsPercent / 100))
	minPods = int(math.Floor(alloc * p.MinPodsPercent / 100))
	if minPods >= maxPods {
		minPods = maxPods - 1
	}
	return maxPods, minPods, true
}

// Managed reports whether new cordons may be placed on the node: it matches
// nodeSelector, is not a control-plane node (unless included) and does not
// carry the donotcordon label.
func (p Policy) Managed(n *events.NodeState) bool {
	if hasLabel(n, events.LabelDoNotCordon) {
		return false
	}
	if !p.IncludeControlPlane && (hasLabel(n, events.LabelControlPlane) || hasLabel(n, events.LabelMaster)) {
		return false
	}
	return p.Selector == nil || p.Selector.Matches(labels.Set(n.Labels))
}

// CordonLimit is the number of nodes opswire may hold at once among
// the managed nodes, and which setting sets it. unlimited is true when neither
// cap is configured (both 0).
func (p Policy) CordonLimit(managed int) (limit int, setting string, unlimited bool) {
	limit, unlimited = math.MaxInt, true
	if p.MaxCordonedNodes > 0 {
		limit, setting, unlimited = p.MaxCordonedNodes, "maxCordonedNodes", false
	}
	if p.MaxCordonedPercent > 0 {
		// Rounded down: the cap is a ceiling that must never be exceeded.
		byPercent := int(math.Floor(float64(managed) * p.MaxCordonedPercent / 100))
		if byPercent < limit {
			limit, setting = byPercent, "maxCordonedPercent"
		}
		unlimited = false
	}
	return limit, setting, unlimited
}

// applied reports whether the effect of the given mode is on the node.
func (p Policy) applied(n *events.NodeState, mode string) bool {
	if mode == EffectTaint {
		return hasTaint(n, p.TaintKey, "NoSchedule")
	}
	return n.Unschedulable
}

// heldBySomeoneElse reports an unmarked node that is already cordoned or
// carries a taint with opswire's key: a person (or another tool) did that,
// and opswire neither adds to it nor ever undoes it.
func (p Policy) heldBySomeoneElse(n *events.NodeState) bool {
	return n.Unschedulable || hasTaint(n, p.TaintKey, "")
}

func hasLabel(n *events.NodeState, key string) bool {
	_, ok := n.Labels[key]
	return ok
}

// hasTaint matches a taint by key, and by effect unless effect is empty.
func hasTaint(n *events.NodeState, key, effect string) bool {
	for _, t := range n.Taints {
		if t.Key == key && (effect == "" || t.Effect == effect) {
			return true
		}
	}
	return false
}

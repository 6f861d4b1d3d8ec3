package cordon

import (
	"fmt"
	"math"
	"slices"
	"strings"

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
	// CapCounts is config.CapCountsUnavailable or config.CapCountsMarks.
	CapCounts            string
	IgnoreTaintKeys      []string
	AlwaysCountTaintKeys []string
	DrainEvictingPercent float64
	DrainEvictedPercent  float64
}

// Taint key prefixes Kubernetes itself manages (node conditions, the node
// lifecycle and cloud controllers): they never make a node "tainted by a person".
var kubernetesTaintPrefixes = []string{"node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"}

// NewPolicy builds the policy of a validated autoCordon section.
func NewPolicy(c config.AutoCordon) Policy {
	return Policy{
		MaxPods: c.MaxPods, MinPods: c.MinPods,
		MaxPodsPercent: c.MaxPodsPercent, MinPodsPercent: c.MinPodsPercent,
		Mode: c.Mode, TaintKey: c.TaintKey,
		Selector: c.Selector(), IncludeControlPlane: c.IncludeControlPlane,
		MaxCordonedNodes: c.MaxCordonedNodes, MaxCordonedPercent: c.MaxCordonedPercent,
		CapCounts: c.CapCounts, IgnoreTaintKeys: c.IgnoreTaintKeys, AlwaysCountTaintKeys: c.AlwaysCountTaintKeys,
		DrainEvictingPercent: c.DrainEvictingPercent, DrainEvictedPercent: c.DrainEvictedPercent,
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
		// Rounded down: the cap is a ceiling that must never be exceeded;
		// but at least one node, so that on a small cluster a percentage never
		// forbids every cordon (20 % of 3 nodes allows one).
		byPercent := max(1, int(math.Floor(float64(managed)*p.MaxCordonedPercent/100)))
		if byPercent < limit {
			limit, setting = byPercent, "maxCordonedPercent"
		}
		unlimited = false
	}
	return limit, setting, unlimited
}

// markEffects returns what opswire's mark on a node says it applied: the
// effects and the keys of its NoSchedule taints. A release lifts exactly
// that and a re-apply puts back exactly that, whatever mode and taintKey are
// configured now (a switch of either must not rewrite the nodes opswire
// already holds). Without a readable mark, the current mode's effect.
func (p Policy) markEffects(annotations map[string]string) (effects, taintKeys []string) {
	m, ok := readMark(annotations)
	if !ok {
		return []string{p.Mode}, []string{p.TaintKey}
	}
	taintKeys = m.TaintKeys
	if len(taintKeys) == 0 && slices.Contains(m.Effects, EffectTaint) {
		taintKeys = []string{p.TaintKey}
	}
	return m.Effects, taintKeys
}

// missingEffects returns the effects opswire's mark lists that are not on
// the node (a person lifted them and left the mark), in the mark's order.
func (p Policy) missingEffects(n *events.NodeState) []string {
	effects, taintKeys := p.markEffects(n.Annotations)
	var missing []string
	for _, e := range effects {
		switch e {
		case EffectCordon:
			if !n.Unschedulable {
				missing = append(missing, e)
			}
		case EffectTaint:
			if slices.ContainsFunc(taintKeys, func(k string) bool { return !hasTaint(n, k, "NoSchedule") }) {
				missing = append(missing, e)
			}
		}
	}
	return missing
}

// releaseEffect names the effect a release of the node lifts, as its mark
// lists it: the cordon when listed (a mark listing both lifts both), else
// the taint.
func (p Policy) releaseEffect(n *events.NodeState) string {
	effects, _ := p.markEffects(n.Annotations)
	if slices.Contains(effects, EffectCordon) {
		return EffectCordon
	}
	return EffectTaint
}

// heldBySomeoneElse reports an unmarked node that is already cordoned or
// carries a taint with opswire's key: a person (or another tool) did that,
// and opswire neither adds to it nor ever undoes it.
func (p Policy) heldBySomeoneElse(n *events.NodeState) bool {
	return n.Unschedulable || hasTaint(n, p.TaintKey, "")
}

// personTaint returns the first taint on the node that a person (or a tool
// acting for one) put there: the seed's rule leaves such a node alone. Keys in
// AlwaysCountTaintKeys always count; Kubernetes' own taints and the keys in
// IgnoreTaintKeys never do; every other taint does, whatever its effect.
func (p Policy) personTaint(n *events.NodeState) (events.Taint, bool) {
	for _, t := range n.Taints {
		switch {
		case matchesKey(p.AlwaysCountTaintKeys, t.Key):
			return t, true
		case matchesKey(p.IgnoreTaintKeys, t.Key):
		case slices.ContainsFunc(kubernetesTaintPrefixes, func(pre string) bool { return strings.HasPrefix(t.Key, pre) }):
		default:
			return t, true
		}
	}
	return events.Taint{}, false
}

// matchesKey matches a taint key against a list of keys and prefixes (an
// entry ending in "*").
func matchesKey(list []string, key string) bool {
	for _, k := range list {
		if pre, ok := strings.CutSuffix(k, "*"); ok && strings.HasPrefix(key, pre) || k == key {
			return true
		}
	}
	return false
}

// Unavailable reports a node that already takes no new pods: cordoned (by
// anyone) or NotReady (Ready False or Unknown; a node that reports no Ready
// condition yet is not counted).
func Unavailable(n *events.NodeState) bool {
	return n.Unschedulable || n.Ready == "False" || n.Ready == "Unknown"
}

// CountsUnavailable reports whether nodes out of service for other reasons
// count toward the caps (capCounts: unavailable).
func (p Policy) CountsUnavailable() bool { return p.CapCounts != config.CapCountsMarks }

// drained reports a node being drained: at least two of its pods, and at
// least DrainEvictingPercent of them, are being evicted through the Eviction
// API at once. A single eviction (a descheduler's) is not a drain.
func (p Policy) drained(n *events.NodeState) bool {
	return p.DrainEvictingPercent > 0 && n.Evicting >= 2 &&
		float64(n.Evicting)*100 >= p.DrainEvictingPercent*float64(n.Pods)
}

// drainedAway reports a node drained at a pace (a kubectl drain slowed by
// PodDisruptionBudgets evicts one pod at a time, each gone before the next is
// evicted, so few are ever evicting at once): of the pods that left the node
// since opswire cordoned it, at least two, and at least DrainEvictedPercent,
// left through the Eviction API. The departures since the cordon are the
// watcher's running totals (NodeState.Departed, DepartedEvicted) minus the
// totals the mark recorded when opswire cordoned the node, so every leader
// computes the same from the same two facts. left counts at least the fall
// of the pod count since the cordon (arrivals on a cordoned node are rare): a
// departure the totals missed then counts as not evicted, never as a drain.
// ok is false without a baseline in the mark (a mark written before opswire
// recorded one, or a dry run), or when the totals went backwards (KUBE lost
// the node's state): the departures are then unknown.
func (p Policy) drainedAway(n *events.NodeState) (left, evicted int, ok bool) {
	if p.DrainEvictedPercent <= 0 {
		return 0, 0, false
	}
	m, found := readMark(n.Annotations)
	if !found || m.Departed == nil {
		return 0, 0, false
	}
	left, evicted = n.Departed-m.Departed.Pods, n.DepartedEvicted-m.Departed.Evicted
	if left < 0 || evicted < 0 || evicted > left {
		return 0, 0, false
	}
	left = max(left, m.Pods-n.Pods)
	return left, evicted, evicted >= 2 && float64(evicted)*100 >= p.DrainEvictedPercent*float64(left)
}

// drainStreak reports a node whose most recent departures look like a paced
// drain: at least two in a row since its last plain departure left through
// the Eviction API or in a way the watcher never saw (NodeState.EvictionStreak:
// gone while no watcher ran, or a relist's tombstone, counts as a possible
// eviction). Plain departures before the drain (DaemonSet replacements,
// completions, scale-downs while the node held between the bounds) do not
// dilute it as they dilute the share in drainedAway. With a baseline in the
// mark, only departures since the cordon count. It needs DrainEvictedPercent
// > 0 (the paced-drain rule switched on).
func (p Policy) drainStreak(n *events.NodeState) (streak int, ok bool) {
	if p.DrainEvictedPercent <= 0 {
		return 0, false
	}
	streak = n.EvictionStreak
	if m, found := readMark(n.Annotations); found && m.Departed != nil {
		if since := n.Departed - m.Departed.Pods; since >= 0 {
			streak = min(streak, since)
		}
	}
	return streak, streak >= 2
}

// evictedSinceCordon reports a node some of whose pods left through the
// Eviction API since opswire cordoned it (the watcher's DepartedEvicted
// minus the mark's baseline), or are being evicted now: at minPods such a
// node is handed over rather than released, however few the evictions and
// however many plain departures came between them. A drain slowed by
// PodDisruptionBudgets, with a Job's completion or a scale-down among its
// evictions, is then never released in its middle, nor a drain that starts
// at minPods + 1 on its first eviction. The price: a single eviction by a
// descheduler also hands the node over (it stays cordoned until a person
// uncordons it). evicted is 0 without a baseline in the mark or when the
// totals are inconsistent (KUBE lost the node's state); an eviction in
// flight still counts then. It needs DrainEvictedPercent > 0 (the
// paced-drain rule switched on).
func (p Policy) evictedSinceCordon(n *events.NodeState) (evicted int, ok bool) {
	if p.DrainEvictedPercent <= 0 {
		return 0, false
	}
	if m, found := readMark(n.Annotations); found && m.Departed != nil {
		left, e := n.Departed-m.Departed.Pods, n.DepartedEvicted-m.Departed.Evicted
		if left >= 0 && e >= 0 && e <= left {
			evicted = e
		}
	}
	return evicted, evicted > 0 || n.Evicting > 0
}

// cordonedByMark reports whether opswire's mark on the node includes the
// cordon effect (spec.unschedulable), which a drain cannot tell apart from a
// person's cordon. Without a readable mark, the current mode says.
func (p Policy) cordonedByMark(n *events.NodeState) bool {
	if m, ok := readMark(n.Annotations); ok {
		return slices.Contains(m.Effects, EffectCordon)
	}
	return p.Mode == EffectCordon
}

func describeTaint(t events.Taint) string {
	if t.Value == "" {
		return fmt.Sprintf("%s:%s", t.Key, t.Effect)
	}
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
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

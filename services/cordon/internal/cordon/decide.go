package cordon

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/shared/events"
)

// Action is what a node needs.
type Action string

const (
	ActionNone     Action = "none"
	ActionCordon   Action = "cordon"
	ActionUncordon Action = "uncordon"
	// ActionHandOver removes opswire's mark and keeps the cordon: the node
	// is a person's from then on (a drain).
	ActionHandOver Action = "handover"
)

// Reason codes: stable, machine-readable, used as metric labels and in logs.
const (
	CodeDoNotCordon       = "donotcordon"        // label present: ignored entirely
	CodeAllocatableAbsent = "allocatable-absent" // percent thresholds but no allocatable pods reported
	CodeUnmanaged         = "unmanaged"          // outside nodeSelector or a control-plane node
	CodeBelowMax          = "below-max"          // unmarked, fewer than maxPods
	CodeHeldByOther       = "held-by-other"      // cordoned/tainted by someone else
	CodeTainted           = "tainted"            // a person's taint: the seed's rule leaves the node alone
	CodeDrained           = "drained"            // handover: a person is draining a node opswire cordoned
	CodeMaxReached        = "max-reached"        // cordon: count reached maxPods
	CodeReapply           = "reapply"            // cordon: marked but the effect was removed
	CodeMinReached        = "min-reached"        // uncordon: count fell to minPods
	CodeHolding           = "holding"            // marked, count above minPods: keep it
	CodeCapReached        = "cap-reached"        // refusal: blast-radius cap
	CodeDoNotCordonHeld   = "donotcordon-held"   // donotcordon on a node opswire holds: left as is, announced once
	CodeEvictionInFlight  = "eviction-in-flight" // marked, at minPods, a pod being evicted: no release while it is
)

// Decision is what one node needs, with the numbers that led to it.
type Decision struct {
	Action  Action
	Code    string
	Reason  string // human-readable, published and recorded on the node
	Pods    int
	MaxPods int
	MinPods int
	// Departed and DepartedEvicted are the node's departure totals the
	// decision saw; a cordon records them in its mark as the baseline.
	Departed, DepartedEvicted int
	// Effect is what the action applies or lifts, as published (the
	// payload's mode): for a node opswire holds, the effect its mark lists
	// (a re-apply: the first one missing; a release or handover: the cordon
	// if listed, else the taint); for a new cordon "" (the current mode).
	Effect string
}

// Evaluate decides what one node needs from its state alone. marked says
// whether the node carries opswire's mark (the label key
// node.kubernetes.io/autocordon); the caller passes it separately because
// it may know of a mark it wrote that the mirror has not shown yet.
//
// The rules, in order:
//  1. donotcordon label: nothing, whatever else holds (on a node opswire
//     holds: CodeDoNotCordonHeld, which the actuator announces once).
//  2. marked, cordoned by opswire's mark, and being drained (most of its
//     pods evicted through the Eviction API): hand the node over to the
//     person draining it (remove the mark, keep the cordon).
//  3. marked, cordoned by opswire's mark, pods <= minPods, and drained at a
//     pace (most of the pods that left since the cordon left through the
//     Eviction API, Policy.drainedAway), or the recent departures are a
//     streak of at least two evictions or departures of unknown final state
//     (Policy.drainStreak): hand over as in 2.
//     Also hand over, at pods <= minPods, when any pod left through the
//     Eviction API since opswire's cordon or one is being evicted
//     (Policy.evictedSinceCordon): a single eviction is enough, a
//     descheduler's too.
//  4. marked, pods <= minPods, and a pod being evicted through the Eviction
//     API (a taint-mode mark, or the paced-drain rule switched off): hold;
//     no release while an eviction is in flight.
//  5. marked and pods <= minPods: uncordon (lift what opswire applied). This
//     holds outside nodeSelector too, so narrowing the selector never strands
//     a node opswire cordoned.
//  6. marked, managed, pods >= maxPods, but the effect was removed (e.g. a
//     person uncordoned without removing the mark): apply it again; the way
//     to keep opswire off a node is the donotcordon label.
//  7. marked otherwise: hold (hysteresis: between the bounds nothing changes).
//  8. unmarked: cordon only if managed, pods >= maxPods, nobody else has
//     cordoned or tainted it with opswire's key, and no person tainted it
//     (the seed's rule; Policy.personTaint says which taints count).
func Evaluate(p Policy, n *events.NodeState, marked bool) Decision {
	d := Decision{Action: ActionNone, Pods: n.Pods, Departed: n.Departed, DepartedEvicted: n.DepartedEvicted}
	if hasLabel(n, events.LabelDoNotCordon) {
		if marked {
			// Nothing either way: the label keeps opswire off the node, so it
			// neither releases nor re-applies what it holds. The actuator
			// says so once, or the node would stay cordoned in silence.
			return d.with(ActionNone, CodeDoNotCordonHeld, "node is labelled %s while it carries opswire's mark (label %s): "+
				"opswire neither releases nor re-applies it; remove %s to give it back to opswire's rules, "+
				"or uncordon it and remove the mark by hand", events.LabelDoNotCordon, events.LabelAutoCordon, events.LabelDoNotCordon)
		}
		return d.with(ActionNone, CodeDoNotCordon, "node is labelled %s", events.LabelDoNotCordon)
	}
	var ok bool
	d.MaxPods, d.MinPods, ok = p.Thresholds(n)
	if !ok {
		return d.with(ActionNone, CodeAllocatableAbsent, "node reports no allocatable pods; percentage thresholds cannot apply")
	}
	if marked {
		// What opswire holds the node with is what its mark lists, not the
		// current mode: a switch of mode or taintKey leaves held nodes as
		// they are.
		missing := p.missingEffects(n)
		d.Effect = p.releaseEffect(n)
		atMin := n.Pods <= d.MinPods
		left, evicted, drainedAway := 0, 0, false
		streak, drainStreak := 0, false
		evictedSince, evictionSeen := 0, false
		if atMin && n.Unschedulable {
			left, evicted, drainedAway = p.drainedAway(n)
			streak, drainStreak = p.drainStreak(n)
			evictedSince, evictionSeen = p.evictedSinceCordon(n)
		}
		switch {
		case n.Unschedulable && p.drained(n) && p.cordonedByMark(n):
			return d.with(ActionHandOver, CodeDrained, "%d of its %d pods are being evicted through the Eviction API: a person is draining the node; "+
				"opswire removes its mark and leaves the node cordoned until a person uncordons it", n.Evicting, n.Pods)
		case drainedAway && p.cordonedByMark(n):
			return d.with(ActionHandOver, CodeDrained, "%d of the %d pods that left the node since opswire cordoned it left through the Eviction API "+
				"(a drain paced by PodDisruptionBudgets): a person is draining the node; "+
				"opswire removes its mark and leaves the node cordoned until a person uncordons it", evicted, left)
		case drainStreak && p.cordonedByMark(n):
			return d.with(ActionHandOver, CodeDrained, "the last %d pods that left the node left through the Eviction API or while no watcher saw them "+
				"(%d departures of unknown final state in all): a person may be draining the node; "+
				"opswire removes its mark and leaves the node cordoned until a person uncordons it", streak, n.DepartedUnknown)
		case evictionSeen && p.cordonedByMark(n):
			return d.with(ActionHandOver, CodeDrained, "%d pod(s) left the node through the Eviction API since opswire cordoned it and %d are being evicted: "+
				"a person (or a descheduler) is evicting its pods; opswire removes its mark and leaves the node cordoned until a person uncordons it",
				evictedSince, n.Evicting)
		case atMin && n.Evicting > 0:
			d.Effect = ""
			return d.with(ActionNone, CodeEvictionInFlight, "%d non-terminated pods <= minPods %d, but %d of them are being evicted through the Eviction API: "+
				"no release while an eviction is in flight", n.Pods, d.MinPods, n.Evicting)
		case atMin:
			return d.with(ActionUncordon, CodeMinReached, "%d non-terminated pods <= minPods %d", n.Pods, d.MinPods)
		case n.Pods >= d.MaxPods && p.Managed(n) && len(missing) > 0:
			d.Effect = missing[0]
			return d.with(ActionCordon, CodeReapply, "%d non-terminated pods >= maxPods %d and %s removed while opswire's mark stayed",
				n.Pods, d.MaxPods, describeEffects(missing))
		default:
			d.Effect = ""
			return d.with(ActionNone, CodeHolding, "%d non-terminated pods > minPods %d", n.Pods, d.MinPods)
		}
	}
	switch {
	case !p.Managed(n):
		return d.with(ActionNone, CodeUnmanaged, "node is outside nodeSelector or a control-plane node")
	case n.Pods < d.MaxPods:
		return d.with(ActionNone, CodeBelowMax, "%d non-terminated pods < maxPods %d", n.Pods, d.MaxPods)
	case p.heldBySomeoneElse(n):
		return d.with(ActionNone, CodeHeldByOther, "node is already cordoned or tainted without opswire's mark")
	}
	if t, ok := p.personTaint(n); ok {
		return d.with(ActionNone, CodeTainted, "node carries the taint %s and not opswire's label: left alone", describeTaint(t))
	}
	return d.with(ActionCordon, CodeMaxReached, "%d non-terminated pods >= maxPods %d", n.Pods, d.MaxPods)
}

// describeEffects names effects in a sentence: "the cordon was", "the
// cordon and the taint were".
func describeEffects(effects []string) string {
	if len(effects) == 1 {
		return "the " + effects[0] + " was"
	}
	return "the " + strings.Join(effects, " and the ") + " were"
}

func (d Decision) with(a Action, code, format string, args ...any) Decision {
	d.Action, d.Code, d.Reason = a, code, fmt.Sprintf(format, args...)
	return d
}

// Fleet is what the blast-radius cap is computed from.
type Fleet struct {
	// Held counts the nodes that count toward the cap, other than the node
	// being decided on: every node carrying opswire's mark (managed or not)
	// and, with capCounts "unavailable", every managed node that is
	// cordoned by anyone or NotReady.
	Held int
	// Marks counts the nodes carrying opswire's mark (all of them).
	Marks int
	// Managed counts nodes eligible for new cordons (Policy.Managed).
	Managed int
	// asOf is the resourceVersion the API count was served at; "" for a
	// count from the mirror.
	asOf string
	// listed is true for a count from an API LIST of every node; node is
	// then the excluded node (the one being decided on) as that LIST
	// returned it, nil when the node does not exist at that version: the
	// actuator's re-read for a new cordon (Actuator.reverify).
	listed bool
	node   *corev1.Node
}

// Admit applies the blast-radius cap to a decision. Only a cordon of a node
// that is not yet marked adds to what opswire holds, so only that can be
// refused; the refusal keeps the numbers and says which setting refused it.
func Admit(p Policy, d Decision, marked bool, f Fleet) (Decision, bool) {
	if d.Action != ActionCordon || marked {
		return d, true
	}
	limit, setting, unlimited := p.CordonLimit(f.Managed)
	if unlimited || f.Held < limit {
		return d, true
	}
	refused := d
	refused.Code = CodeCapReached
	if setting == "maxCordonedPercent" {
		refused.Reason = fmt.Sprintf("%s; refused: %s, the cap is %d (maxCordonedPercent %g%% of %d managed nodes, at least 1)",
			d.Reason, p.describeHeld(f), limit, p.MaxCordonedPercent, f.Managed)
	} else {
		refused.Reason = fmt.Sprintf("%s; refused: %s, the cap is %d (maxCordonedNodes)",
			d.Reason, p.describeHeld(f), limit)
	}
	return refused, false
}

func (p Policy) describeHeld(f Fleet) string {
	if !p.CountsUnavailable() {
		return fmt.Sprintf("opswire already holds %d node(s)", f.Held)
	}
	return fmt.Sprintf("%d node(s) are already out of service (%d marked by opswire, the others cordoned by someone else or NotReady)", f.Held, f.Marks)
}

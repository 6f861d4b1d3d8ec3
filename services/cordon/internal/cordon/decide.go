package cordon

import (
	"fmt"

	"github.com/opswire/opswire/shared/events"
)

// Action is what a node needs.
type Action string

const (
	ActionNone     Action = "none"
	ActionCordon   Action = "cordon"
	ActionUncordon Action = "uncordon"
)

// Reason codes: stable, machine-readable, used as metric labels and in logs.
const (
	CodeDoNotCordon       = "donotcordon"        // label present: ignored entirely
	CodeAllocatableAbsent = "allocatable-absent" // percent thresholds but no allocatable pods reported
	CodeUnmanaged         = "unmanaged"          // outside nodeSelector or a control-plane node
	CodeBelowMax          = "below-max"          // unmarked, fewer than maxPods
	CodeHeldByOther       = "held-by-other"      // cordoned/tainted by someone else
	CodeMaxReached        = "max-reached"        // cordon: count reached maxPods
	CodeReapply           = "reapply"            // cordon: marked but the effect was removed
	CodeMinReached        = "min-reached"        // uncordon: count fell to minPods
	CodeHolding           = "holding"            // marked, count above minPods: keep it
	CodeCapReached        = "cap-reached"        // refusal: blast-radius cap
)

// Decision is what one node needs, with the numbers that led to it.
type Decision struct {
	Action  Action
	Code    string
	Reason  string // human-readable, published and recorded on the node
	Pods    int
	MaxPods int
	MinPods int
}

// Evaluate decides what one node needs from its state alone. marked says
// whether the node carries opswire's mark (the label key
// node.kubernetes.io/autocordon); the caller passes it separately because
// it may know of a mark it wrote that the mirror has not shown yet.
//
// The rules, in order:
//  1. donotcordon label: nothing, whatever else holds.
//  2. marked and pods <= minPods: uncordon (lift what opswire applied). This
//     holds outside nodeSelector too, so narrowing the selector never strands
//     a node opswire cordoned.
//  3. marked, managed, pods >= maxPods, but the effect was removed (e.g. a
//     person uncordoned without removing the mark): apply it again; the way
//     to keep opswire off a node is the donotcordon label.
//  4. marked otherwise: hold (hysteresis: between the bounds nothing changes).
//  5. unmarked: cordon only if managed, pods >= maxPods and nobody else has
//     cordoned or tainted it with opswire's key.
func Evaluate(p Policy, n *events.NodeState, marked bool) Decision {
	d := Decision{Action: ActionNone, Pods: n.Pods}
	if hasLabel(n, events.LabelDoNotCordon) {
		return d.with(ActionNone, CodeDoNotCordon, "node is labelled %s", events.LabelDoNotCordon)
	}
	var ok bool
	d.MaxPods, d.MinPods, ok = p.Thresholds(n)
	if !ok {
		return d.with(ActionNone, CodeAllocatableAbsent, "node reports no allocatable pods; percentage thresholds cannot apply")
	}
	if marked {
		switch {
		case n.Pods <= d.MinPods:
			return d.with(ActionUncordon, CodeMinReached, "%d non-terminated pods <= minPods %d", n.Pods, d.MinPods)
		case n.Pods >= d.MaxPods && p.Managed(n) && !p.applied(n, p.Mode):
			return d.with(ActionCordon, CodeReapply, "%d non-terminated pods >= maxPods %d and the %s was removed while opswire's mark stayed", n.Pods, d.MaxPods, p.Mode)
		default:
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
	return d.with(ActionCordon, CodeMaxReached, "%d non-terminated pods >= maxPods %d", n.Pods, d.MaxPods)
}

func (d Decision) with(a Action, code, format string, args ...any) Decision {
	d.Action, d.Code, d.Reason = a, code, fmt.Sprintf(format, args...)
	return d
}

// Fleet is what the blast-radius cap is computed from.
type Fleet struct {
	// Held counts nodes carrying opswire's mark (managed or not).
	Held int
	// Managed counts nodes eligible for new cordons (Policy.Managed).
	Managed int
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
		refused.Reason = fmt.Sprintf("%s; refused: opswire already holds %d node(s), the cap is %d (maxCordonedPercent %g%% of %d managed nodes)",
			d.Reason, f.Held, limit, p.MaxCordonedPercent, f.Managed)
	} else {
		refused.Reason = fmt.Sprintf("%s; refused: opswire already holds %d node(s), the cap is %d (maxCordonedNodes)",
			d.Reason, f.Held, limit)
	}
	return refused, false
}

package cleanup

import (
	"fmt"
	"time"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// Action is what the actor does with a pod.
type Action int

const (
	// None: the pod is not a cleanup candidate (or is out of scope).
	None Action = iota
	// Wait: the pod becomes a candidate at Decision.Until.
	Wait
	// Skip: the pod is a candidate but a safety rule holds it; the reason is published once.
	Skip
	// Delete: a Failed pod is deleted (normal delete, UID precondition).
	Delete
	// ForceDelete: a stuck Terminating pod is deleted with grace period 0.
	ForceDelete
)

func (a Action) String() string {
	switch a {
	case None:
		return "none"
	case Wait:
		return "wait"
	case Skip:
		return "skip"
	case Delete:
		return "delete"
	case ForceDelete:
		return "forcedelete"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Reasons of decisions. They are the Reason of the OPS payload and part of
// the Kubernetes Event message; CamelCase like Kubernetes reasons.
const (
	ReasonFailedPod         = "FailedPod"              // Failed with a configured status.reason, older than minAge
	ReasonStuckTerminating  = "StuckTerminating"       // deletionTimestamp + terminatingTimeout has passed
	ReasonOptedOut          = "OptedOut"               // the pod carries the opt-out label
	ReasonHasFinalizers     = "HasFinalizers"          // stuck, but finalizers would keep it; removeFinalizers is false
	ReasonStatefulSetOnNode = "StatefulSetOnReadyNode" // stuck StatefulSet pod on a Ready node
)

// Decision is the outcome of Policy.Decide.
type Decision struct {
	Action Action
	// Want is the deletion the pod qualifies for (Delete or ForceDelete) when
	// Action is Wait or Skip; equal to Action when acting.
	Want    Action
	Reason  string
	Message string
	// Until is when a waiting pod becomes due.
	Until time.Time
	// RemoveFinalizers: a ForceDelete must first clear the pod's finalizers.
	RemoveFinalizers bool
}

// Policy is the delException section in the form the decision needs.
type Policy struct {
	Reasons                     map[string]bool
	MinAge                      time.Duration
	TerminatingTimeout          time.Duration // 0 disables force deletion
	RemoveFinalizers            bool
	AllowStatefulSetOnReadyNode bool
	Namespaces                  config.Namespaces
	OptOutLabel                 string // empty: no opt-out label
}

// NewPolicy builds the policy of a delException section.
func NewPolicy(c config.DelException) Policy {
	p := Policy{
		Reasons:                     make(map[string]bool, len(c.Reasons)),
		MinAge:                      c.MinAge.Duration,
		TerminatingTimeout:          c.TerminatingTimeout.Duration,
		RemoveFinalizers:            c.RemoveFinalizers,
		AllowStatefulSetOnReadyNode: c.AllowStatefulSetOnReadyNode,
		Namespaces:                  c.Namespaces,
		OptOutLabel:                 c.OptOutLabel,
	}
	for _, r := range c.Reasons {
		p.Reasons[r] = true
	}
	return p
}

// Decide says what to do with a pod at time now. node is the pod's node, nil
// when it is unknown (deleted). Decide is pure: the same inputs always give
// the same decision, and it is used both on the mirrored state and on the
// live pod re-read right before a write.
//
// Order: out-of-scope namespaces are silently ignored (scoping, not a
// decision); then the pod must qualify (stuck Terminating, or Failed with a
// configured reason and old enough); only a qualifying pod can be skipped,
// so a skip always names a rule that held back a real deletion.
func (p Policy) Decide(pod *events.PodState, node *events.NodeState, now time.Time) Decision {
	if pod == nil || !p.Namespaces.Allows(pod.Namespace) {
		return Decision{}
	}
	var d Decision
	switch {
	case pod.DeletionTimestamp != nil:
		if p.TerminatingTimeout <= 0 {
			return Decision{}
		}
		// The API server sets deletionTimestamp to the delete request time
		// plus the grace period, so the grace period is already in it.
		due := pod.DeletionTimestamp.Add(p.TerminatingTimeout)
		d = Decision{Want: ForceDelete, Reason: ReasonStuckTerminating,
			Message: fmt.Sprintf("still Terminating %s after deletionTimestamp %s (grace period included)", p.TerminatingTimeout, pod.DeletionTimestamp.UTC().Format(time.RFC3339))}
		if now.Before(due) {
			d.Action, d.Until = Wait, due
			return d
		}
	case pod.Phase == "Failed" && p.Reasons[pod.Reason]:
		due := pod.CreationTimestamp.Add(p.MinAge)
		d = Decision{Want: Delete, Reason: ReasonFailedPod,
			Message: fmt.Sprintf("phase Failed, reason %s", pod.Reason)}
		if now.Before(due) {
			d.Action, d.Until = Wait, due
			return d
		}
	default:
		return Decision{}
	}
	if p.OptOutLabel != "" {
		if _, ok := pod.Labels[p.OptOutLabel]; ok {
			d.Action, d.Reason = Skip, ReasonOptedOut
			d.Message = "pod carries the opt-out label " + p.OptOutLabel
			return d
		}
	}
	if d.Want == ForceDelete {
		if pod.Finalizers > 0 && !p.RemoveFinalizers {
			d.Action, d.Reason = Skip, ReasonHasFinalizers
			d.Message = fmt.Sprintf("stuck Terminating with %d finalizer(s); removeFinalizers is false", pod.Finalizers)
			return d
		}
		if pod.Owner != nil && pod.Owner.Kind == "StatefulSet" && node != nil && node.Ready == "True" && !p.AllowStatefulSetOnReadyNode {
			d.Action, d.Reason = Skip, ReasonStatefulSetOnNode
			d.Message = fmt.Sprintf("StatefulSet %s pod on node %s that is still Ready: force deletion could run two copies of one identity", pod.Owner.Name, node.Name)
			return d
		}
		d.RemoveFinalizers = pod.Finalizers > 0
	}
	d.Action = d.Want
	return d
}

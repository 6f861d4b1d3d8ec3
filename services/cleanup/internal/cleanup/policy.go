package cleanup

import (
	"fmt"
	"strings"
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
	ReasonFailedPod         = "FailedPod"              // Failed with a configured status.reason, failed longer than minAge ago
	ReasonStuckTerminating  = "StuckTerminating"       // deletionTimestamp + terminatingTimeout has passed
	ReasonOptedOut          = "OptedOut"               // the pod carries the opt-out label
	ReasonHasFinalizers     = "HasFinalizers"          // stuck, but finalizers would keep it: removeFinalizers is false, or one is the Job controller's
	ReasonStatefulSetOnNode = "StatefulSetOnReadyNode" // stuck pod with identity, storage or a DaemonSet owner on a Ready node
	ReasonNodeNotDown       = "NodeNotConfirmedDown"   // the same on a NotReady node not known to be down
	ReasonMassNodeFailure   = "MassNodeFailure"        // too many nodes not Ready: force deletions paused
)

// Decision is the outcome of Policy.Decide.
type Decision struct {
	Action Action
	// Want is the deletion the pod qualifies for (Delete or ForceDelete) when
	// Action is Wait or Skip; equal to Action when acting.
	Want    Action
	Reason  string
	Message string
	// Until is when a waiting pod becomes due, or when a held pod may be
	// released by time alone (statefulNotReadyTimeout); zero otherwise.
	Until time.Time
	// RemoveFinalizers: the deletion must first clear the pod's finalizers.
	RemoveFinalizers bool
	// Remains: a Delete leaves the pod in place, Terminating until other
	// controllers remove its finalizers; it is reported as a deletion
	// requested, not as a pod deleted.
	Remains bool
}

// Policy is the delException section in the form the decision needs.
type Policy struct {
	// Reasons holds the configured status.reason values, lower-cased: they
	// match case-insensitively.
	Reasons                     map[string]bool
	MinAge                      time.Duration
	TerminatingTimeout          time.Duration // 0 disables force deletion
	RemoveFinalizers            bool
	AllowStatefulSetOnReadyNode bool
	// StatefulNotReadyTimeout > 0 releases a pod with identity or storage
	// whose node has not been Ready for that long; 0 never does.
	StatefulNotReadyTimeout time.Duration
	// BrakeNotReadyShare: force deletions pause while more than this share
	// of the nodes is not Ready (1 never brakes).
	BrakeNotReadyShare float64
	Namespaces         config.Namespaces
	OptOutLabel        string // empty: no opt-out label
}

// NewPolicy builds the policy of a delException section.
func NewPolicy(c config.DelException) Policy {
	return Policy{
		Reasons:                     reasonSet(c.Reasons...),
		MinAge:                      c.MinAge.Duration,
		TerminatingTimeout:          c.TerminatingTimeout.Duration,
		RemoveFinalizers:            c.RemoveFinalizers,
		AllowStatefulSetOnReadyNode: c.AllowStatefulSetOnReadyNode,
		StatefulNotReadyTimeout:     c.StatefulNotReadyTimeout.Duration,
		BrakeNotReadyShare:          c.BrakeNotReadyShare,
		Namespaces:                  c.Namespaces,
		OptOutLabel:                 c.OptOutLabel,
	}
}

func reasonSet(reasons ...string) map[string]bool {
	set := make(map[string]bool, len(reasons))
	for _, r := range reasons {
		set[strings.ToLower(r)] = true
	}
	return set
}

// knownReasons are the status.reason values Kubernetes writes on Failed pods
// (kubelet eviction, admission: pkg/kubelet/lifecycle/predicate.go, node
// shutdown, activeDeadlineSeconds, the node lifecycle controller),
// lower-cased. Admission failures for lack of a resource are
// "OutOf<resource>" (OutOfcpu, OutOfnvidia.com/gpu, …).
var knownReasons = reasonSet("Evicted", "Preempting", "Terminated", "Shutdown", "NodeShutdown", "NodeLost",
	"DeadlineExceeded", "NodeAffinity", "NodeName", "NodePorts", "TaintToleration", "UnexpectedAdmissionError",
	"ContainerStatusUnknown", "SysctlForbidden", "PodOSNotSupported", "PodOSSelectorNodeLabelDoesNotMatch",
	"InvalidNodeInfo", "UnknownReason", "InitContainerRestartPolicyForbidden", "SupplementalGroupsPolicyNotSupported",
	"UnexpectedPredicateFailureType")

// UnknownReasons returns the configured reasons that are not ones Kubernetes
// writes, for a start-up warning: a typo would otherwise match nothing, silently.
func UnknownReasons(reasons []string) []string {
	var out []string
	for _, r := range reasons {
		l := strings.ToLower(r)
		if !knownReasons[l] && !(strings.HasPrefix(l, "outof") && len(l) > len("outof")) {
			out = append(out, r)
		}
	}
	return out
}

// NodeCount is how many nodes the cluster has and how many of them are not
// Ready (False, Unknown or without the condition).
type NodeCount struct {
	Nodes, NotReady int
}

// Facts are what a decision depends on besides the pod.
type Facts struct {
	// Node is the pod's node; nil when it does not exist (deleted, or the pod
	// was never scheduled).
	Node *events.NodeState
	// Now is the API server's time (ServerClock): the deadlines compare with
	// timestamps the API server wrote.
	Now time.Time
	// Nodes is the cluster's node count, for the mass-failure brake.
	Nodes NodeCount
	// Tally, when set, is where the count stands now: the actuator's live
	// decision, right before the write, takes the count from it, so the
	// brake is judged at the write (Decide itself reads only Nodes).
	Tally *NodeTally
}

// Braking reports whether force deletions pause: more than
// BrakeNotReadyShare of the nodes is not Ready.
func (p Policy) Braking(n NodeCount) bool {
	return n.Nodes > 0 && float64(n.NotReady) > p.BrakeNotReadyShare*float64(n.Nodes)
}

// Decide says what to do with a pod, given the facts around it. Decide is
// pure: the same inputs always give the same decision, and it is used both
// on the mirrored state and on the live pod re-read right before a write.
//
// Order: out-of-scope namespaces are silently ignored (scoping, not a
// decision); then the pod must qualify (stuck Terminating, or Failed with a
// configured reason and failed long enough ago); only a qualifying pod can be
// skipped, so a skip always names a rule that held back a real deletion.
func (p Policy) Decide(pod *events.PodState, f Facts) Decision {
	if pod == nil || !p.Namespaces.Allows(pod.Namespace) {
		return Decision{}
	}
	now := f.Now
	var d Decision
	switch {
	case interruptedDelete(pod) && p.Reasons[strings.ToLower(pod.Reason)]:
		// A DELETE of this Failed pod was cut off half-way (its client died
		// mid-request: a killed leader): the API server had marked it deleted
		// with grace 0 but not removed it. Nothing runs in it and no kubelet
		// will finish it; deleting it again completes the same deletion.
		d = Decision{Want: Delete, Reason: ReasonFailedPod,
			Message: fmt.Sprintf("phase Failed, reason %s; an earlier deletion (deletionTimestamp %s, grace 0) did not complete",
				pod.Reason, pod.DeletionTimestamp.UTC().Format(time.RFC3339))}
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
	case pod.Phase == "Failed" && p.Reasons[strings.ToLower(pod.Reason)]:
		if leftToController(pod) {
			return Decision{}
		}
		since, from := failedSince(pod)
		due := since.Add(p.MinAge)
		d = Decision{Want: Delete, Reason: ReasonFailedPod,
			Message: fmt.Sprintf("phase Failed, reason %s, since %s (%s)", pod.Reason, since.UTC().Format(time.RFC3339), from)}
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
	if d.Want == Delete {
		// A Failed pod is deleted at once by the API server (grace 0 for
		// terminal pods) unless finalizers keep it. Its finalizers are
		// never cleared here, even with removeFinalizers: their
		// controllers let go once they have done their part (the Job
		// controller once it has counted the pod), and a pod they keep
		// Terminating for terminatingTimeout is a stuck pod, the only one
		// removeFinalizers clears.
		d.Remains = pod.Finalizers > 0
		d.Action = Delete
		return d
	}
	if pod.JobTracking {
		d.Action, d.Reason = Skip, ReasonHasFinalizers
		d.Message = fmt.Sprintf("stuck Terminating with the Job controller's %s finalizer (%d finalizer(s) in all): "+
			"the Job controller removes it once it has counted the pod (with podReplacementPolicy Failed, which a podFailurePolicy implies, "+
			"only once the pod's phase is Failed), and cleanup never does", jobTrackingFinalizer, pod.Finalizers)
		return d
	}
	if pod.Finalizers > 0 && !p.RemoveFinalizers {
		d.Action, d.Reason = Skip, ReasonHasFinalizers
		d.Message = fmt.Sprintf("stuck Terminating with %d finalizer(s); removeFinalizers is false", pod.Finalizers)
		return d
	}
	if held, ok := p.partition(pod, f); !ok {
		return held
	}
	if p.Braking(f.Nodes) && !downByTaint(f.Node) {
		d.Action, d.Reason = Skip, ReasonMassNodeFailure
		d.Message = fmt.Sprintf("%d of %d nodes are not Ready (more than %.0f%%): force deletions are paused until fewer are",
			f.Nodes.NotReady, f.Nodes.Nodes, 100*p.BrakeNotReadyShare)
		return d
	}
	d.RemoveFinalizers = pod.Finalizers > 0
	d.Action = d.Want
	return d
}

// jobTrackingFinalizer is the Job controller's finalizer (batchv1.JobTrackingFinalizer).
const jobTrackingFinalizer = "batch.kubernetes.io/job-tracking"

// leftToController reports whether a Failed pod belongs to a controller that
// deletes its own Failed pods: the DaemonSet controller (podsShouldBeOnNode,
// with a per-node backoff against a kubelet that keeps rejecting the pod)
// and the StatefulSet controller (processReplica, which deletes a pod in a
// terminal phase and creates it again). Deleting them too would race those
// controllers and defeat the DaemonSet controller's backoff.
func leftToController(pod *events.PodState) bool {
	return pod.Owner != nil && (pod.Owner.Kind == "DaemonSet" || pod.Owner.Kind == "StatefulSet")
}

// downByTaint reports whether a node is known down by a person's (or a
// fencing controller's) word: not Ready and tainted out-of-service. PodGC's
// gcTerminating force-deletes the Terminating pods of such a node whatever
// the state of its zone, so the brake does not hold them either: the brake
// guards against reading a partition as dead nodes, and the taint is the
// assertion that this node is off.
func downByTaint(node *events.NodeState) bool {
	return node != nil && node.Ready != "True" && node.HasTaint(events.TaintOutOfService)
}

// interruptedDelete reports whether a pod is a Failed pod the API server
// marked deleted with grace period 0 and no finalizers: such a pod is removed
// in the same request, so it is still there only when that request was cut
// off between the two writes (the apiserver updates the object, then deletes
// it, and stops when its client goes away).
func interruptedDelete(pod *events.PodState) bool {
	return pod.DeletionTimestamp != nil && pod.Phase == "Failed" && pod.Finalizers == 0 &&
		pod.DeletionGracePeriodSeconds != nil && *pod.DeletionGracePeriodSeconds == 0
}

// holdsNode reports whether a pod of that controller kind (the controller
// reference's, "" without one), with storage or not (kube.PodHoldsStorage),
// is tied to what its node may still hold, so that removing it from the API
// while its kubelet may still run it would run a second copy beside the
// first:
//   - a StatefulSet pod's identity (name, volume): the StatefulSet controller
//     creates the same name again once the old pod is gone from the API;
//   - a pod's storage (a claim, an inline disk, a CSI inline or network
//     volume, a hostPath mounted read-write): a replacement attaches or
//     writes the same data. For a disk, the attach/detach controller
//     detaches it from the old node by force once the pod is gone from the
//     API and the node is not healthy (after maxWaitForUnmountDuration, 6
//     min; at once with the out-of-service taint), and the replacement
//     attaches it while the partitioned node may still write;
//   - a DaemonSet pod's node: the DaemonSet controller creates a node's pod
//     when none exists there (a Terminating one still counts, so it waits;
//     pkg/controller/daemon podsShouldBeOnNode), and the new agent lands on
//     the same node, beside the old one a hung runtime may still be running
//     (two CNI, log or storage agents on one node).
//
// The live re-check uses it too, to know that it must read the node.
func holdsNode(kind string, storage bool) bool {
	return storage || kind == "StatefulSet" || kind == "DaemonSet"
}

// partition applies the rule for pods tied to their node or storage
// (holdsNode: StatefulSet and DaemonSet pods, pods with storage): force
// deletion lets a replacement start while, in a network partition or with
// a hung runtime, the kubelet may still run the pod and write to its volume. Such a pod is force-deleted only when its node is
// known to be down: deleted, or not Ready and tainted out-of-service
// (Kubernetes' non-graceful node shutdown; the same two conditions PodGC's
// gcTerminating requires before it force-deletes a Terminating pod). A Ready
// node that still carries the taint came back from a shutdown before anyone
// removed the taint: its kubelet runs pods again, so the taint alone
// releases nothing. ok is false when the pod is held; held is then the skip.
func (p Policy) partition(pod *events.PodState, f Facts) (held Decision, ok bool) {
	kind := ""
	if pod.Owner != nil {
		kind = pod.Owner.Kind
	}
	if !holdsNode(kind, pod.Storage) {
		return Decision{}, true
	}
	node := f.Node
	if node == nil {
		return Decision{}, true
	}
	if downByTaint(node) {
		return Decision{}, true
	}
	outOfService := node.HasTaint(events.TaintOutOfService)
	var what string
	switch kind {
	case "StatefulSet":
		what = "StatefulSet " + pod.Owner.Name + " pod"
	case "DaemonSet":
		what = "DaemonSet " + pod.Owner.Name + " pod"
	default:
		what = "pod with storage (a volume other than emptyDir, configMap, secret, downwardAPI, projected, image or a read-only hostPath)"
	}
	held = Decision{Action: Skip, Want: ForceDelete}
	if node.Ready == "True" {
		if p.AllowStatefulSetOnReadyNode {
			return Decision{}, true
		}
		held.Reason = ReasonStatefulSetOnNode
		held.Message = fmt.Sprintf("%s on node %s that is still Ready: force deletion could run two copies of one identity", what, node.Name)
		if kind == "DaemonSet" {
			held.Message = fmt.Sprintf("%s on node %s that is still Ready: force deletion lets the DaemonSet controller start a second agent on that node while the first may still run", what, node.Name)
		}
		if outOfService {
			held.Message += fmt.Sprintf(" (the node carries %s but is Ready: it came back, and the taint releases a pod only on a node that is not Ready)", events.TaintOutOfService)
		}
		return held, false
	}
	held.Reason = ReasonNodeNotDown
	held.Message = fmt.Sprintf("%s on node %s that is not Ready (%s) but neither deleted nor tainted %s: in a partition its kubelet may still run it",
		what, node.Name, readyOr(node.Ready), events.TaintOutOfService)
	// The timeout is for a node whose kubelet is silent (Unknown, or no
	// Ready condition). Ready=False is a kubelet alive and reporting: the
	// pod is stuck because it cannot finish it (a hung runtime or
	// unmount), so its containers may well still run.
	if p.StatefulNotReadyTimeout > 0 && node.ReadySince != nil && node.Ready != "False" {
		due := node.ReadySince.Add(p.StatefulNotReadyTimeout)
		if !f.Now.Before(due) {
			return Decision{}, true
		}
		held.Until = due
		held.Message += fmt.Sprintf("; released at %s (statefulNotReadyTimeout %s)", due.UTC().Format(time.RFC3339), p.StatefulNotReadyTimeout)
	}
	return held, false
}

// failedSince is when a Failed pod failed, and where that time comes from:
// the watcher's failure time (containers' finish, conditions' transitions) or,
// when the status carries none, the pod's creation. The failure time is
// written on the kubelet's clock and the creation on the API server's: a
// node clock behind would date the failure before the pod existed and make
// minAge pass at once, so it is never earlier than the creation.
func failedSince(pod *events.PodState) (time.Time, string) {
	switch {
	case pod.FailedAt == nil:
		return pod.CreationTimestamp, "no failure time in the status: creation time"
	case pod.FailedAt.Before(pod.CreationTimestamp):
		return pod.CreationTimestamp, fmt.Sprintf("the status's failure time %s is before the creation (node clock behind): creation time",
			pod.FailedAt.UTC().Format(time.RFC3339))
	}
	return *pod.FailedAt, "failure time"
}

func readyOr(s string) string {
	if s == "" {
		return "no Ready condition"
	}
	return "Ready " + s
}

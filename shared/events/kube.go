// Package events defines the typed JSON payloads carried in the body of every
// opswire message. The CloudEvents type (ce-type) names the payload and its
// version, so a consumer can reject what it does not understand instead of
// guessing (DESIGN §4).
//
// The KUBE payloads are compact on purpose: at 150,000 pods the whole mirror
// must stay in the tens of megabytes, so they carry only what the actors decide on.
package events

import "time"

// CloudEvents types of the KUBE stream.
const (
	TypePod  = "io.opswire.kube.pod.v1"
	TypeNode = "io.opswire.kube.node.v1"
)

// Op says whether a KUBE message is a live snapshot or a tombstone.
type Op string

const (
	OpUpsert Op = "upsert"
	OpDelete Op = "delete"
)

// Owner is the controller that owns a pod, resolved to its workload where cheap
// (a ReplicaSet named <deployment>-<hash> is reported as that Deployment).
type Owner struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// Container is the per-container part of a pod's state.
type Container struct {
	Name string `json:"name"`
	// Kind is empty for an app container, ContainerInit for an init
	// container and ContainerSidecar for an init container with
	// restartPolicy Always.
	Kind       string `json:"kind,omitempty"`
	LastReason string `json:"lastReason,omitempty"` // e.g. OOMKilled
	// Restarts and LastExitCode side by side: 64 bytes a container instead
	// of 72 (padding), in every pod of every mirror.
	Restarts     int32      `json:"restarts"`
	LastExitCode int32      `json:"lastExitCode,omitempty"` // of the last termination
	LastFinished *time.Time `json:"lastFinished,omitempty"`
}

// Container kinds (Container.Kind); an app container has none.
const (
	ContainerInit    = "init"
	ContainerSidecar = "sidecar"
)

// PodState is the compact state of one pod, published on kube.<cluster>.pod.<ns>.<pod>.
type PodState struct {
	Op                         Op          `json:"op"`
	UID                        string      `json:"uid"`
	Namespace                  string      `json:"namespace"`
	Name                       string      `json:"name"`
	ResourceVersion            string      `json:"resourceVersion,omitempty"`
	NodeName                   string      `json:"nodeName,omitempty"`
	Phase                      string      `json:"phase,omitempty"`
	Reason                     string      `json:"reason,omitempty"`
	Message                    string      `json:"message,omitempty"`
	CreationTimestamp          time.Time   `json:"creationTimestamp"`
	DeletionTimestamp          *time.Time  `json:"deletionTimestamp,omitempty"`
	DeletionGracePeriodSeconds *int64      `json:"deletionGracePeriodSeconds,omitempty"`
	Finalizers                 int         `json:"finalizers,omitempty"`
	Owner                      *Owner      `json:"owner,omitempty"`
	Containers                 []Container `json:"containers,omitempty"`
	// FailedAt is when a Failed pod failed (kube.PodFailedAt); nil otherwise
	// or when the status carries no time.
	FailedAt *time.Time `json:"failedAt,omitempty"`
	// Storage is true when the pod has a volume that outlives it
	// (kube.PodHoldsStorage: anything but emptyDir, configMap, secret,
	// downwardAPI, projected, image, gitRepo and read-only hostPath): a
	// second copy of the pod would attach or write the same data. The wire
	// name is "pvc", from when only claims counted; consumers of the KUBE
	// stream read it under that name.
	Storage bool `json:"pvc,omitempty"`
	// JobTracking is true when the pod carries the Job controller's
	// batch.kubernetes.io/job-tracking finalizer: the Job has not counted
	// the pod yet, and only the Job controller may remove it.
	JobTracking bool `json:"jobTracking,omitempty"`
	// Labels holds only the labels opswire acts on (opt-outs); never the full set.
	Labels map[string]string `json:"labels,omitempty"`
	// DisruptionReason is the reason of the pod's DisruptionTarget condition
	// while it is True (e.g. EvictionByEvictionAPI, PreemptionByScheduler,
	// DeletionByTaintManager): why the pod is about to be terminated. A
	// tombstone carries EvictionByEvictionAPI when the deleted pod counted on
	// a node and was evicted through the Eviction API.
	DisruptionReason string `json:"disruptionReason,omitempty"`
}

// DisruptionEvictionByEvictionAPI is the DisruptionTarget reason the API
// server sets on a pod evicted through the Eviction API (kubectl drain, the
// descheduler, cluster-autoscaler).
const DisruptionEvictionByEvictionAPI = "EvictionByEvictionAPI"

// EvictedByAPI reports a pod being evicted through the Eviction API.
func (p *PodState) EvictedByAPI() bool { return p.DisruptionReason == DisruptionEvictionByEvictionAPI }

// Restarts is the sum of the restart counts of all containers, init and
// sidecar containers included (as kubectl's RESTARTS column counts them).
func (p *PodState) Restarts() int64 {
	var n int64
	for _, c := range p.Containers {
		n += int64(c.Restarts)
	}
	return n
}

// Terminated reports whether the pod no longer occupies a slot on its node
// (the same rule the scheduler uses: Succeeded or Failed).
func (p *PodState) Terminated() bool { return p.Phase == "Succeeded" || p.Phase == "Failed" }

// Taint is a node taint, without the time it was added.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// NodeState is the compact state of one node, published on kube.<cluster>.node.<node>.
type NodeState struct {
	Op              Op                `json:"op"`
	UID             string            `json:"uid"`
	Name            string            `json:"name"`
	ResourceVersion string            `json:"resourceVersion,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`      // only labels opswire reads
	Annotations     map[string]string `json:"annotations,omitempty"` // only opswire's own
	Unschedulable   bool              `json:"unschedulable,omitempty"`
	Taints          []Taint           `json:"taints,omitempty"`
	Ready           string            `json:"ready,omitempty"` // True, False, Unknown or empty
	// ReadySince is the Ready condition's lastTransitionTime.
	ReadySince      *time.Time `json:"readySince,omitempty"`
	AllocatablePods int64      `json:"allocatablePods,omitempty"`
	EphemeralBytes  int64      `json:"ephemeralStorageBytes,omitempty"` // capacity
	// Pods is the number of non-terminated pods bound to the node, counted by the watcher.
	Pods int `json:"pods"`
	// Evicting is how many of those Pods are being evicted through the
	// Eviction API (PodState.EvictedByAPI): a kubectl drain shows as most of
	// the node's pods evicting at once.
	Evicting int `json:"evicting,omitempty"`
	// Departed counts the pods that have stopped counting on the node (deleted,
	// or terminated: Succeeded or Failed) since the watcher began counting for
	// it: a running total that only grows, carried from one watcher to the next
	// through this state. DepartedEvicted counts those of them that left
	// through the Eviction API (their last state had the DisruptionTarget
	// condition with reason EvictionByEvictionAPI). An actor compares them
	// with the values it saw earlier: a drain paced by PodDisruptionBudgets,
	// which evicts one pod at a time, shows as most departures being evictions
	// although few pods are ever evicting at once.
	//
	// Pods owned by a DaemonSet or mirror (static) pods, owned by their Node,
	// are not counted: kubectl drain never evicts them, and their replacements
	// (a DaemonSet rollout) would dilute the share of evictions.
	Departed        int `json:"departed,omitempty"`
	DepartedEvicted int `json:"departedEvicted,omitempty"`
	// DepartedUnknown counts those departures whose final state the watcher
	// never saw: pods gone while no watcher ran (found missing at start) or
	// while it re-listed (a DeletedFinalStateUnknown tombstone). They may have
	// been evictions; an actor treats them as possible evictions.
	DepartedUnknown int `json:"departedUnknown,omitempty"`
	// EvictionStreak counts the departures since the node's last departure
	// known to be plain (a delete or completion not through the Eviction
	// API): each eviction or unknown departure adds one, a plain one resets it
	// to zero. A drain paced by PodDisruptionBudgets shows as a growing streak
	// however many plain departures came before it.
	EvictionStreak int `json:"evictionStreak,omitempty"`
	// PodsResourceVersion is the resourceVersion of the watcher's pod list
	// when it counted Pods. An actor re-counting from the API asks for a list
	// at least that new (resourceVersionMatch=NotOlderThan), which the API
	// server answers from its watch cache instead of a consistent read.
	PodsResourceVersion string `json:"podsResourceVersion,omitempty"`
	ImageBytes          int64  `json:"imageBytes,omitempty"`
	ImageCount          int    `json:"imageCount,omitempty"`
	// ImagesTruncated is true when the kubelet's list may have been cut at its
	// limit (watcher.nodeStatusMaxImages, default 50): it lists exactly that
	// many images, so ImageBytes is a lower bound.
	ImagesTruncated bool `json:"imagesTruncated,omitempty"`
}

// KubeletImageListLimit is the number of images the kubelet reports at most
// by default (--node-status-max-images), watcher.nodeStatusMaxImages' default.
const KubeletImageListLimit = 50

// Label and annotation keys opswire reads or writes on nodes and pods.
const (
	LabelAutoCordon      = "node.kubernetes.io/autocordon"
	LabelDoNotCordon     = "node.kubernetes.io/donotcordon"
	AnnotationAutoCordon = "opswire.io/autocordon"
	LabelControlPlane    = "node-role.kubernetes.io/control-plane"
	LabelMaster          = "node-role.kubernetes.io/master"
	// LabelOptOut on a pod keeps every opswire actor away from it.
	LabelOptOut = "opswire.io/ignore"
	// TaintOutOfService is Kubernetes' non-graceful node shutdown signal: a
	// person (or a fencing controller) asserts that the node is down.
	TaintOutOfService = "node.kubernetes.io/out-of-service"
)

// HasTaint reports whether the node carries a taint with this key (any value or effect).
func (n *NodeState) HasTaint(key string) bool {
	for _, t := range n.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

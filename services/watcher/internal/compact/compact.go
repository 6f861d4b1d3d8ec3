// Package compact turns full Pod and Node objects into the compact states of
// DESIGN §4, as informer transforms. The informer cache then holds a few
// hundred bytes per pod instead of several kilobytes: at 150,000 pods that is
// the difference between ~150 MB and ~600 MB of watcher heap.
package compact

import (
	"strings"
	"sync"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kube"
)

// Pod is what the informer caches for a pod: the compact state, which also
// answers for the metadata the cache needs (meta.go).
type Pod struct {
	absentMeta // zero-size, first: no padding
	State      events.PodState
}

// Node is what the informer caches for a node.
type Node struct {
	absentMeta
	State events.NodeState
}

// PodLabelPrefix selects the pod labels the actors read (opt-outs); other
// labels are dropped.
const PodLabelPrefix = "opswire.io/"

// PodTransform returns an informer transform that compacts pods. It accepts
// already compacted objects, as client-go may transform an object twice.
// The strings pods repeat (namespace, node, phase, reasons, owner, container
// names) are interned: at 150,000 pods one copy of each instead of one per
// pod and decode.
func PodTransform(messageLimit int) func(any) (any, error) {
	var mu sync.Mutex
	in := &events.Interner{}
	return func(obj any) (any, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil
		}
		var blk *podBlock
		var out *Pod
		if len(p.Status.InitContainerStatuses)+len(p.Status.ContainerStatuses) <= len(blk.c) {
			blk = new(podBlock)
			out = &blk.pod
		} else {
			out = new(Pod) // the block's container room would be wasted
		}
		s := &out.State
		podState(s, p, messageLimit, blk)
		mu.Lock()
		intern(s, in)
		mu.Unlock()
		var own []byte
		if blk != nil {
			own = blk.own[:0]
		}
		ownStrings(s, own)
		return out, nil
	}
}

// podBlock is a cached pod with room for what it owns besides: two
// containers (most pods have one or two), their two last-finished times and
// the pod's own strings (ownStrings), in one allocation of 512 bytes, a size
// class of its own. The usual pod was five objects (288 + 128 + 2 × 24 + 64
// bytes, their size classes), each placed among the garbage of the decoded
// pod, whose spans it kept in use (heap in use after GC at 150,000 pods:
// docs/watcher.md). A pod with more containers is allocated as before, and
// so are own strings that do not fit. own, with no pointers, is last, where
// the collector does not look.
type podBlock struct {
	pod Pod
	c   [2]events.Container
	t   [2]time.Time
	own [72]byte
}

// intern replaces the strings of s that repeat across pods by shared copies.
func intern(s *events.PodState, in *events.Interner) {
	s.Namespace, s.NodeName, s.Phase = in.String(s.Namespace), in.String(s.NodeName), in.String(s.Phase)
	s.Reason, s.DisruptionReason = in.String(s.Reason), in.String(s.DisruptionReason)
	if s.Owner != nil {
		s.Owner = in.Owner(events.Owner{Kind: in.String(s.Owner.Kind), Name: in.String(s.Owner.Name)})
	}
	for i := range s.Containers {
		c := &s.Containers[i]
		c.Name, c.Kind, c.LastReason = in.String(c.Name), in.String(c.Kind), in.String(c.LastReason)
	}
	for k, v := range s.Labels {
		s.Labels[in.String(k)] = in.String(v)
	}
}

// ownStrings copies the strings of s that are its own (uid, name,
// resourceVersion, message) into one allocation: buf when they fit in its
// capacity, else a new one. They were allocated by the
// decoding of the full pod, among its other strings, which the transform
// drops: kept as they are, each pins a span otherwise freed, and at 150,000
// pods the heap in use held spans of such garbage besides them.
func ownStrings(s *events.PodState, buf []byte) {
	fields := [...]*string{&s.UID, &s.Name, &s.ResourceVersion, &s.Message}
	n := 0
	for _, f := range fields {
		n += len(*f)
	}
	if n == 0 {
		return
	}
	if cap(buf) < n {
		buf = make([]byte, 0, n)
	}
	buf = buf[:0]
	for _, f := range fields {
		buf = append(buf, *f...)
	}
	off := 0
	for _, f := range fields {
		l := len(*f)
		if l > 0 {
			// buf is never written again: the strings may share it.
			*f = unsafe.String(&buf[off], l)
		}
		off += l
	}
}

// NodeTransform compacts nodes; maxImages is the kubelets' image list cap
// (NodeState).
func NodeTransform(maxImages int) func(any) (any, error) {
	return func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		return &Node{State: NodeState(n, maxImages)}, nil
	}
}

// PodState extracts the compact state of a pod.
func PodState(p *corev1.Pod, messageLimit int) events.PodState {
	var s events.PodState
	podState(&s, p, messageLimit, nil)
	return s
}

// podState writes the compact state of p into the zero *s, its containers
// and their times into blk when they fit (blk may be nil).
func podState(s *events.PodState, p *corev1.Pod, messageLimit int, blk *podBlock) {
	*s = events.PodState{
		Op:                         events.OpUpsert,
		UID:                        string(p.UID),
		Namespace:                  p.Namespace,
		Name:                       p.Name,
		ResourceVersion:            p.ResourceVersion,
		NodeName:                   p.Spec.NodeName,
		Phase:                      string(p.Status.Phase),
		Reason:                     p.Status.Reason,
		Message:                    truncate(p.Status.Message, messageLimit),
		CreationTimestamp:          p.CreationTimestamp.UTC(),
		DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		Finalizers:                 len(p.Finalizers),
		Owner:                      owner(p),
		FailedAt:                   kube.PodFailedAt(p),
		Storage:                    kube.PodHoldsStorage(p),
		JobTracking:                kube.PodTracksJob(p),
	}
	if p.DeletionTimestamp != nil {
		t := p.DeletionTimestamp.UTC()
		s.DeletionTimestamp = &t
	}
	for k, v := range p.Labels {
		if strings.HasPrefix(k, PodLabelPrefix) {
			if s.Labels == nil {
				s.Labels = map[string]string{}
			}
			s.Labels[k] = v
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			s.DisruptionReason = c.Reason
		}
	}
	// Init and sidecar containers first, in the order the kubelet runs them:
	// kubectl's RESTARTS counts them too, and a pod stuck in
	// Init:CrashLoopBackOff restarts nothing but an init container.
	if n := len(p.Status.InitContainerStatuses) + len(p.Status.ContainerStatuses); n > 0 {
		var times []time.Time
		if blk != nil && n <= len(blk.c) {
			// Full to its capacity once filled: an append to a copy of the
			// state reallocates, never writes into the block.
			s.Containers = blk.c[:0:n]
			times = blk.t[:0:n]
		} else {
			s.Containers = make([]events.Container, 0, n)
		}
		sidecars := restartableInitContainers(p)
		for i := range p.Status.InitContainerStatuses {
			kind := events.ContainerInit
			if sidecars[p.Status.InitContainerStatuses[i].Name] {
				kind = events.ContainerSidecar
			}
			s.Containers = append(s.Containers, container(&p.Status.InitContainerStatuses[i], kind, slot(times, len(s.Containers))))
		}
		for i := range p.Status.ContainerStatuses {
			s.Containers = append(s.Containers, container(&p.Status.ContainerStatuses[i], "", slot(times, len(s.Containers))))
		}
	}
}

// slot is &times[i] within its capacity, else nil.
func slot(times []time.Time, i int) *time.Time {
	if i < cap(times) {
		return &times[:cap(times)][i]
	}
	return nil
}

// container is the compact state of one container status; kind is "" for
// an app container, events.ContainerInit or events.ContainerSidecar. Its
// last-finished time is written to at when at is not nil.
func container(cs *corev1.ContainerStatus, kind string, at *time.Time) events.Container {
	c := events.Container{Name: cs.Name, Kind: kind, Restarts: cs.RestartCount}
	term := cs.LastTerminationState.Terminated
	if term == nil {
		term = cs.State.Terminated
	}
	if term != nil {
		c.LastReason, c.LastExitCode = term.Reason, term.ExitCode
		if !term.FinishedAt.IsZero() {
			if at == nil {
				at = new(time.Time)
			}
			*at = term.FinishedAt.UTC()
			c.LastFinished = at
		}
	}
	return c
}

// restartableInitContainers names the init containers with restartPolicy
// Always: sidecars, which run for the pod's whole life.
func restartableInitContainers(p *corev1.Pod) map[string]bool {
	var out map[string]bool
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			if out == nil {
				out = map[string]bool{}
			}
			out[c.Name] = true
		}
	}
	return out
}

// owner resolves the pod's controller to its workload where that is cheap: a
// ReplicaSet created by a Deployment is named <deployment>-<pod-template-hash>.
func owner(p *corev1.Pod) *events.Owner {
	ref := metav1.GetControllerOf(p)
	if ref == nil {
		return nil
	}
	o := &events.Owner{Kind: ref.Kind, Name: ref.Name}
	if ref.Kind == "ReplicaSet" {
		if hash := p.Labels["pod-template-hash"]; hash != "" && strings.HasSuffix(ref.Name, "-"+hash) {
			o.Kind, o.Name = "Deployment", strings.TrimSuffix(ref.Name, "-"+hash)
		}
	}
	return o
}

// NodeState extracts the compact state of a node. The pod count is filled in
// by the watcher, which counts from its pod cache. maxImages is the kubelets'
// --node-status-max-images (-1: no cap): the kubelet cuts its image list at
// that many, so only a list of exactly that length may be incomplete.
func NodeState(n *corev1.Node, maxImages int) events.NodeState {
	s := events.NodeState{
		Op:              events.OpUpsert,
		UID:             string(n.UID),
		Name:            n.Name,
		ResourceVersion: n.ResourceVersion,
		Unschedulable:   n.Spec.Unschedulable,
		AllocatablePods: n.Status.Allocatable.Pods().Value(),
		EphemeralBytes:  n.Status.Capacity.StorageEphemeral().Value(),
	}
	if len(n.Labels) > 0 {
		s.Labels = make(map[string]string, len(n.Labels))
		for k, v := range n.Labels {
			s.Labels[k] = v
		}
	}
	for k, v := range n.Annotations {
		if strings.HasPrefix(k, "opswire.io/") {
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[k] = v
		}
	}
	for _, t := range n.Spec.Taints {
		s.Taints = append(s.Taints, events.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	s.Ready, s.ReadySince = kube.NodeReady(n)
	for _, img := range n.Status.Images {
		s.ImageBytes += img.SizeBytes
	}
	s.ImageCount = len(n.Status.Images)
	s.ImagesTruncated = maxImages > 0 && s.ImageCount == maxImages
	return s
}

func truncate(s string, limit int) string {
	if limit <= 0 || len(s) <= limit {
		return s
	}
	// Cut on a rune boundary.
	cut := limit
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}

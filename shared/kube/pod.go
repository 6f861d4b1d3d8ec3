package kube

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodFailedAt is when a Failed pod failed: the latest of its containers'
// finish times (init containers included) and its conditions' transitions
// (Ready turning False, DisruptionTarget being set). Nil for a pod that is
// not Failed or whose status carries no time. The latest time is taken so
// that a pod is never thought to have failed earlier than it did; nothing in
// a pod's status changes after it failed.
func PodFailedAt(p *corev1.Pod) *time.Time {
	if p.Status.Phase != corev1.PodFailed {
		return nil
	}
	var at time.Time
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
				at = t.FinishedAt.Time
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.LastTransitionTime.After(at) {
			at = c.LastTransitionTime.Time
		}
	}
	if at.IsZero() {
		return nil
	}
	at = at.UTC()
	return &at
}

// PodMountsPVC reports whether the pod mounts a PersistentVolumeClaim,
// directly or through a generic ephemeral volume.
func PodMountsPVC(p *corev1.Pod) bool {
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
			return true
		}
	}
	return false
}

// NodeReady returns the status of the node's Ready condition ("" when it has
// none) and its lastTransitionTime (nil when unset).
func NodeReady(n *corev1.Node) (string, *time.Time) {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.LastTransitionTime.IsZero() {
				return string(c.Status), nil
			}
			t := c.LastTransitionTime.UTC()
			return string(c.Status), &t
		}
	}
	return "", nil
}

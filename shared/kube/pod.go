package kube

import (
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
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

// PodHoldsStorage reports whether the pod has a volume whose data, or whose
// attachment, outlives the pod: everything but the node-local, disposable
// volumes the kubelet creates for the pod and removes with it (emptyDir,
// configMap, secret, downwardAPI, projected, image, gitRepo). It is an
// allow-list, so a claim, an inline disk (iSCSI, FC, RBD, Cinder, cloud
// disks), a network filesystem, a CSI inline volume and any volume type
// added to Kubernetes later count as storage: a second copy of the pod,
// started while the first may still run, would attach or write the same
// data.
//
// A hostPath volume counts when some container mounts it read-write: its
// data stays on the node, and a replacement that lands on the same node
// (pinned there, as pods keeping data in a hostPath usually are) writes the
// same files while the first copy may still run. Mounted read-only
// everywhere (/etc/localtime, certificates), it cannot be written through
// that mount and does not count.
func PodHoldsStorage(p *corev1.Pod) bool {
	for i := range p.Spec.Volumes {
		v := &p.Spec.Volumes[i]
		switch {
		case v.EmptyDir != nil, v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Projected != nil,
			v.Image != nil, v.GitRepo != nil:
		case v.HostPath != nil:
			if mountedReadWrite(p, v.Name) {
				return true
			}
		default:
			return true
		}
	}
	return false
}

// mountedReadWrite reports whether a container of the pod (init and
// ephemeral containers included) mounts the named volume read-write.
func mountedReadWrite(p *corev1.Pod, volume string) bool {
	rw := func(mounts []corev1.VolumeMount) bool {
		for _, m := range mounts {
			if m.Name == volume && !m.ReadOnly {
				return true
			}
		}
		return false
	}
	for _, c := range p.Spec.InitContainers {
		if rw(c.VolumeMounts) {
			return true
		}
	}
	for _, c := range p.Spec.Containers {
		if rw(c.VolumeMounts) {
			return true
		}
	}
	for _, c := range p.Spec.EphemeralContainers {
		if rw(c.VolumeMounts) {
			return true
		}
	}
	return false
}

// PodTracksJob reports whether the pod carries the Job controller's
// batch.kubernetes.io/job-tracking finalizer: the Job has not counted the
// pod's end yet, and the Job controller removes it once it has.
func PodTracksJob(p *corev1.Pod) bool {
	return slices.Contains(p.Finalizers, batchv1.JobTrackingFinalizer)
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

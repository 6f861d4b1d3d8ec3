package kube

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPodFailedAt(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	terminated := func(d time.Duration) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: at(d)}}}
	}
	tests := []struct {
		name   string
		status corev1.PodStatus
		want   *time.Time
	}{
		{name: "running", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{terminated(0)}}},
		{name: "failed without times", status: corev1.PodStatus{Phase: corev1.PodFailed}},
		{name: "latest container finish", status: corev1.PodStatus{Phase: corev1.PodFailed,
			InitContainerStatuses: []corev1.ContainerStatus{terminated(-time.Hour)},
			ContainerStatuses:     []corev1.ContainerStatus{terminated(-time.Minute), terminated(time.Second), {}}},
			want: ptr(t0.Add(time.Second))},
		{name: "condition transition", status: corev1.PodStatus{Phase: corev1.PodFailed,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, LastTransitionTime: at(-time.Hour)},
				{Type: corev1.DisruptionTarget, LastTransitionTime: at(-time.Second)}}},
			want: ptr(t0.Add(-time.Second))},
		{name: "the later of both", status: corev1.PodStatus{Phase: corev1.PodFailed,
			ContainerStatuses: []corev1.ContainerStatus{terminated(-time.Minute)},
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, LastTransitionTime: at(0)}}},
			want: ptr(t0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PodFailedAt(&corev1.Pod{Status: tc.status})
			if (got == nil) != (tc.want == nil) || got != nil && !got.Equal(*tc.want) {
				t.Fatalf("PodFailedAt = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodMountsPVC(t *testing.T) {
	pvc := corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}
	eph := corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}
	empty := corev1.Volume{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	for _, tc := range []struct {
		name string
		vols []corev1.Volume
		want bool
	}{{"none", nil, false}, {"emptyDir", []corev1.Volume{empty}, false}, {"claim", []corev1.Volume{empty, pvc}, true}, {"generic ephemeral", []corev1.Volume{eph}, true}} {
		if got := PodMountsPVC(&corev1.Pod{Spec: corev1.PodSpec{Volumes: tc.vols}}); got != tc.want {
			t.Errorf("%s: PodMountsPVC = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestNodeReady(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	n := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
		{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: t0}}}}
	if s, since := NodeReady(n); s != "Unknown" || since == nil || !since.Equal(t0.Time) {
		t.Fatalf("NodeReady = %q %v", s, since)
	}
	if s, since := NodeReady(&corev1.Node{}); s != "" || since != nil {
		t.Fatalf("NodeReady(no condition) = %q %v", s, since)
	}
}

func ptr[T any](v T) *T { return &v }

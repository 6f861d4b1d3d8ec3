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

func TestPodHoldsStorage(t *testing.T) {
	vol := func(name string, src corev1.VolumeSource) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: src}
	}
	emptyDir := vol("tmp", corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}})
	disposable := []corev1.Volume{emptyDir,
		vol("cm", corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}),
		vol("sec", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{}}),
		vol("down", corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}),
		vol("proj", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}),
		vol("img", corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example/data:1"}}),
		vol("git", corev1.VolumeSource{GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/r.git"}}),
	}
	hostPath := vol("host", corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/data"}})
	mounts := func(readOnly ...bool) []corev1.VolumeMount {
		var out []corev1.VolumeMount
		for _, ro := range readOnly {
			out = append(out, corev1.VolumeMount{Name: "host", MountPath: "/data", ReadOnly: ro})
		}
		return out
	}
	tests := []struct {
		name string
		vols []corev1.Volume
		// app and init are the mounts of the host volume by an app and an init container.
		app, init []corev1.VolumeMount
		want      bool
	}{
		{name: "no volume"},
		{name: "only node-local, disposable volumes", vols: disposable},
		{name: "claim", vols: append([]corev1.Volume{vol("data", corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}})}, disposable...), want: true},
		{name: "generic ephemeral volume (a claim)", vols: []corev1.Volume{vol("scratch", corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}})}, want: true},
		{name: "inline iSCSI", vols: []corev1.Volume{emptyDir, vol("lun", corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:disk", Lun: 0}})}, want: true},
		{name: "inline fibre channel", vols: []corev1.Volume{vol("fc", corev1.VolumeSource{FC: &corev1.FCVolumeSource{}})}, want: true},
		{name: "inline rbd", vols: []corev1.Volume{vol("rbd", corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{}})}, want: true},
		{name: "inline cinder", vols: []corev1.Volume{vol("cinder", corev1.VolumeSource{Cinder: &corev1.CinderVolumeSource{}})}, want: true},
		{name: "inline AWS EBS", vols: []corev1.Volume{vol("ebs", corev1.VolumeSource{AWSElasticBlockStore: &corev1.AWSElasticBlockStoreVolumeSource{}})}, want: true},
		{name: "inline GCE PD", vols: []corev1.Volume{vol("pd", corev1.VolumeSource{GCEPersistentDisk: &corev1.GCEPersistentDiskVolumeSource{}})}, want: true},
		{name: "inline Azure disk", vols: []corev1.Volume{vol("az", corev1.VolumeSource{AzureDisk: &corev1.AzureDiskVolumeSource{}})}, want: true},
		{name: "inline CSI", vols: []corev1.Volume{vol("csi", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "ebs.csi.aws.com"}})}, want: true},
		{name: "NFS", vols: []corev1.Volume{vol("nfs", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{}})}, want: true},
		{name: "flexVolume", vols: []corev1.Volume{vol("flex", corev1.VolumeSource{FlexVolume: &corev1.FlexVolumeSource{}})}, want: true},
		{name: "a volume type this code does not know", vols: []corev1.Volume{{Name: "new"}}, want: true},
		{name: "hostPath mounted read-write", vols: []corev1.Volume{hostPath}, app: mounts(true, false), want: true},
		{name: "hostPath mounted read-write by an init container", vols: []corev1.Volume{hostPath}, app: mounts(true), init: mounts(false), want: true},
		{name: "hostPath mounted read-only everywhere", vols: []corev1.Volume{hostPath}, app: mounts(true, true), init: mounts(true)},
		{name: "hostPath mounted by no container", vols: []corev1.Volume{hostPath}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: corev1.PodSpec{Volumes: tc.vols,
				Containers:     []corev1.Container{{Name: "app", VolumeMounts: tc.app}, {Name: "other"}},
				InitContainers: []corev1.Container{{Name: "init", VolumeMounts: tc.init}}}}
			if got := PodHoldsStorage(p); got != tc.want {
				t.Fatalf("PodHoldsStorage = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodTracksJob(t *testing.T) {
	for _, tc := range []struct {
		finalizers []string
		want       bool
	}{{nil, false}, {[]string{"example.com/hold"}, false}, {[]string{"example.com/hold", "batch.kubernetes.io/job-tracking"}, true}} {
		if got := PodTracksJob(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Finalizers: tc.finalizers}}); got != tc.want {
			t.Errorf("PodTracksJob(%v) = %v, want %v", tc.finalizers, got, tc.want)
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

package compact

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/events"
)

func ptr[T any](v T) *T { return &v }

func TestPodState(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-7d9f-abcde", UID: "u1", ResourceVersion: "42",
				Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f", "opswire.io/ignore": "true"},
				Annotations:     map[string]string{"big": strings.Repeat("x", 4096)},
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-7d9f", Controller: ptr(true)}}},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", RestartCount: 7,
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}},
			}}},
		}
	}
	tests := []struct {
		name  string
		edit  func(*corev1.Pod)
		check func(t *testing.T, s events.PodState)
	}{
		{"deployment owner resolved, only opswire labels kept", nil, func(t *testing.T, s events.PodState) {
			if s.Owner == nil || s.Owner.Kind != "Deployment" || s.Owner.Name != "web" {
				t.Errorf("owner = %+v, want Deployment/web", s.Owner)
			}
			if len(s.Labels) != 1 || s.Labels["opswire.io/ignore"] != "true" {
				t.Errorf("labels = %v", s.Labels)
			}
		}},
		{"restarts and last termination", nil, func(t *testing.T, s events.PodState) {
			if s.Restarts() != 7 || s.Containers[0].LastReason != "OOMKilled" || s.Containers[0].LastExitCode != 137 {
				t.Errorf("containers = %+v", s.Containers)
			}
		}},
		{"init and sidecar restarts counted and named", func(p *corev1.Pod) {
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers = []corev1.Container{{Name: "migrate"}, {Name: "proxy", RestartPolicy: &always}}
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{
				{Name: "migrate", RestartCount: 500, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}},
				{Name: "proxy", RestartCount: 3},
			}
		}, func(t *testing.T, s events.PodState) {
			if s.Restarts() != 510 || len(s.Containers) != 3 {
				t.Fatalf("restarts %d containers %+v, want 500+3+7 over 3 containers", s.Restarts(), s.Containers)
			}
			init, side, app := s.Containers[0], s.Containers[1], s.Containers[2]
			if init.Name != "migrate" || init.Kind != events.ContainerInit || init.Restarts != 500 || init.LastReason != "Error" || init.LastExitCode != 1 {
				t.Errorf("init container %+v", init)
			}
			if side.Name != "proxy" || side.Kind != events.ContainerSidecar || side.Restarts != 3 {
				t.Errorf("sidecar %+v", side)
			}
			if app.Name != "app" || app.Kind != "" || app.Restarts != 7 {
				t.Errorf("app container %+v", app)
			}
		}},
		{"replicaset without template hash stays a ReplicaSet", func(p *corev1.Pod) { delete(p.Labels, "pod-template-hash") }, func(t *testing.T, s events.PodState) {
			if s.Owner.Kind != "ReplicaSet" || s.Owner.Name != "web-7d9f" {
				t.Errorf("owner = %+v", s.Owner)
			}
		}},
		{"evicted", func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", strings.Repeat("é", 300)
		}, func(t *testing.T, s events.PodState) {
			if !s.Terminated() || s.Reason != "Evicted" || len(s.Message) > 260 || !strings.HasSuffix(s.Message, "…") {
				t.Errorf("state = phase %q reason %q message len %d", s.Phase, s.Reason, len(s.Message))
			}
		}},
		{"evicted through the Eviction API", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"}}
		}, func(t *testing.T, s events.PodState) {
			if !s.EvictedByAPI() || s.DisruptionReason != "EvictionByEvictionAPI" {
				t.Errorf("disruption reason = %q", s.DisruptionReason)
			}
		}},
		{"disruption condition not true", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse, Reason: "EvictionByEvictionAPI"}}
		}, func(t *testing.T, s events.PodState) {
			if s.EvictedByAPI() || s.DisruptionReason != "" {
				t.Errorf("disruption reason = %q", s.DisruptionReason)
			}
		}},
		{"failure time and claim", func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses[0].State.Terminated = &corev1.ContainerStateTerminated{FinishedAt: deleted}
			p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		}, func(t *testing.T, s events.PodState) {
			if s.FailedAt == nil || !s.FailedAt.Equal(deleted.Time) || !s.Storage {
				t.Errorf("failedAt %v storage %v", s.FailedAt, s.Storage)
			}
		}},
		{"running: no failure time, no claim", nil, func(t *testing.T, s events.PodState) {
			if s.FailedAt != nil || s.Storage {
				t.Errorf("failedAt %v storage %v", s.FailedAt, s.Storage)
			}
		}},
		{"terminating with finalizers", func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.Finalizers = &deleted, ptr(int64(30)), []string{"a", "b"}
		}, func(t *testing.T, s events.PodState) {
			if s.DeletionTimestamp == nil || !s.DeletionTimestamp.Equal(deleted.Time) || *s.DeletionGracePeriodSeconds != 30 || s.Finalizers != 2 || s.JobTracking {
				t.Errorf("state = %+v", s)
			}
		}},
		{"the Job controller's finalizer", func(p *corev1.Pod) {
			p.Finalizers = []string{"a", "batch.kubernetes.io/job-tracking"}
		}, func(t *testing.T, s events.PodState) {
			if s.Finalizers != 2 || !s.JobTracking {
				t.Errorf("finalizers %d jobTracking %v", s.Finalizers, s.JobTracking)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			if tc.edit != nil {
				tc.edit(p)
			}
			obj, err := PodTransform(256)(p)
			if err != nil {
				t.Fatal(err)
			}
			cp := obj.(*Pod)
			// What the informer's store reads through metav1.Object.
			m, err := meta.Accessor(cp)
			if err != nil {
				t.Fatal(err)
			}
			if m.GetName() != p.Name || m.GetNamespace() != "ns" || m.GetResourceVersion() != "42" || m.GetUID() != p.UID ||
				m.GetAnnotations() != nil || m.GetLabels() != nil {
				t.Fatalf("cached metadata: name %q ns %q rv %q uid %q", m.GetName(), m.GetNamespace(), m.GetResourceVersion(), m.GetUID())
			}
			if key, err := cache.MetaNamespaceKeyFunc(cp); err != nil || key != "ns/"+p.Name {
				t.Fatalf("store key %q, %v", key, err)
			}
			tc.check(t, cp.State)
			again, _ := PodTransform(256)(obj) // transforms may run twice
			if again != obj {
				t.Fatal("transform of a compact pod must return it unchanged")
			}
		})
	}
}

func TestNodeState(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "nu", Labels: map[string]string{"pool": "a", events.LabelAutoCordon: "true"},
			Annotations: map[string]string{"opswire.io/autocordon": "x", "other": "y"}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")},
			Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.Now(),
				LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}},
		},
	}
	for i := 0; i < events.KubeletImageListLimit; i++ {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{SizeBytes: 1 << 20})
	}
	s := NodeState(n, events.KubeletImageListLimit)
	if s.ReadySince == nil || !s.ReadySince.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("readySince = %v", s.ReadySince)
	}
	if !s.Unschedulable || len(s.Taints) != 1 || s.Ready != "False" || s.AllocatablePods != 110 || s.EphemeralBytes != 100<<30 {
		t.Fatalf("state = %+v", s)
	}
	if s.ImageBytes != 50<<20 || s.ImageCount != 50 || !s.ImagesTruncated {
		t.Fatalf("images = %d bytes, %d, truncated %v", s.ImageBytes, s.ImageCount, s.ImagesTruncated)
	}
	if s.Labels["pool"] != "a" || len(s.Annotations) != 1 {
		t.Fatalf("labels %v annotations %v", s.Labels, s.Annotations)
	}
	// A heartbeat alone must not change the compact state.
	n2 := n.DeepCopy()
	n2.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Minute))
	n2.ResourceVersion = "99"
	a, b := NodeState(n, events.KubeletImageListLimit), NodeState(n2, events.KubeletImageListLimit)
	a.ResourceVersion, b.ResourceVersion = "", ""
	if !equalJSON(t, a, b) {
		t.Fatal("heartbeat changed the compact node state")
	}
}

// TestCompactObjectsAreCacheable: compact nodes key like nodes, and a deep
// copy shares nothing with the original.
func TestCompactObjectsAreCacheable(t *testing.T) {
	obj, _ := NodeTransform(events.KubeletImageListLimit)(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "nu", ResourceVersion: "7",
		Labels: map[string]string{"pool": "a"}}})
	n := obj.(*Node)
	if key, err := cache.MetaNamespaceKeyFunc(n); err != nil || key != "n1" {
		t.Fatalf("node store key %q, %v", key, err)
	}
	n.SetNamespace("ignored")
	if n.GetNamespace() != "" || n.GetUID() != "nu" || n.GetResourceVersion() != "7" {
		t.Fatalf("node metadata: ns %q uid %q rv %q", n.GetNamespace(), n.GetUID(), n.GetResourceVersion())
	}
	c := n.DeepCopyObject().(*Node)
	c.State.Labels["pool"] = "b"
	c.SetResourceVersion("8")
	if n.State.Labels["pool"] != "a" || n.GetResourceVersion() != "7" || c.State.Name != "n1" {
		t.Fatalf("deep copy shares state: original %+v copy %+v", n.State, c.State)
	}
	pobj, _ := PodTransform(0)(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "pu"},
		Spec: corev1.PodSpec{NodeName: "n1"}})
	p := pobj.(*Pod)
	if pc := p.DeepCopyObject().(*Pod); pc.State.NodeName != "n1" || pc.GetUID() != "pu" || pc == p {
		t.Fatalf("pod copy %+v", pc.State)
	}
}

// TestPodTransformInterns: two pods of one namespace, node and workload share
// one copy of those strings (and of the owner), and keep their own values.
func TestPodTransformInterns(t *testing.T) {
	transform := PodTransform(256)
	pod := func(name string) *Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: strings.Clone("shop"), Name: name, UID: types.UID("u-" + name),
				Labels:          map[string]string{"pod-template-hash": "7d9f"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: strings.Clone("web-7d9f"), Controller: ptr(true)}}},
			Spec:   corev1.PodSpec{NodeName: strings.Clone("node-1")},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: strings.Clone("app")}}},
		}
		out, err := transform(p)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*Pod)
	}
	a, b := pod("web-7d9f-a"), pod("web-7d9f-b")
	if a.State.Namespace != "shop" || a.State.NodeName != "node-1" || a.State.Owner.Name != "web" || a.State.Name != "web-7d9f-a" || b.State.Name != "web-7d9f-b" {
		t.Fatalf("values changed: %+v / %+v", a.State, b.State)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.State.Namespace, b.State.Namespace) || !same(a.State.NodeName, b.State.NodeName) ||
		!same(a.State.Containers[0].Name, b.State.Containers[0].Name) || a.State.Owner != b.State.Owner {
		t.Fatal("namespace, node, container name and owner are not shared")
	}
}

func TestPodTransformOwnStringsShareOneAllocation(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: strings.Clone("web-1"), UID: types.UID(strings.Clone("u-1")), ResourceVersion: strings.Clone("42")},
		Status:     corev1.PodStatus{Message: strings.Clone("evicted")},
	}
	out, err := PodTransform(256)(p)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*Pod).State
	if s.UID != "u-1" || s.Name != "web-1" || s.ResourceVersion != "42" || s.Message != "evicted" {
		t.Fatalf("values changed: %+v", s)
	}
	at := func(x string) uintptr { return uintptr(unsafe.Pointer(unsafe.StringData(x))) }
	if at(s.Name) != at(s.UID)+3 || at(s.ResourceVersion) != at(s.Name)+5 || at(s.Message) != at(s.ResourceVersion)+2 {
		t.Fatal("uid, name, resourceVersion and message are not one allocation")
	}
	if at(s.Name) == at(p.Name) {
		t.Fatal("the name still points into the decoded pod")
	}
}

// The transform keeps a pod in one block when its containers and strings fit
// (podBlock), and otherwise allocates the rest: either way its state is what
// PodState gives, and a container slice in the block is full, so that an
// append to a copy of the state never writes into the cached pod.
func TestPodTransformBlockMatchesPodState(t *testing.T) {
	finished := metav1.NewTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	status := func(name string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, RestartCount: 2, LastTerminationState: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: finished}}}
	}
	for _, tc := range []struct {
		name       string
		containers int
		message    string
	}{
		{"no containers", 0, ""},
		{"one container", 1, "short"},
		{"two containers", 2, ""},
		{"three containers", 3, ""},
		{"own strings past the block", 2, strings.Repeat("m", 200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "0c1f3b9e-5a7d-4e2b-9c8a-1d2e3f4a5b6c", ResourceVersion: "123456"},
				Spec:       corev1.PodSpec{NodeName: "node-1"},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, Message: tc.message},
			}
			for i := range tc.containers {
				p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, status("c"+string(rune('a'+i))))
			}
			want := PodState(p, 256)
			out, err := PodTransform(256)(p)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*Pod).State
			if !equalJSON(t, got, want) {
				t.Fatalf("transform %+v, PodState %+v", got, want)
			}
			if len(got.Containers) != cap(got.Containers) {
				t.Fatalf("containers len %d cap %d: an append would write into the cached pod", len(got.Containers), cap(got.Containers))
			}
			for i := range got.Containers {
				if got.Containers[i].LastFinished == nil || !got.Containers[i].LastFinished.Equal(finished.Time) {
					t.Fatalf("container %d finished at %v", i, got.Containers[i].LastFinished)
				}
			}
		})
	}
}

// TestImageListLongerThanTheDefaultCapIsComplete: the kubelet cuts its image
// list at --node-status-max-images (default 50; docs/report.md recommends
// raising it, e.g. to 200), so only a list of exactly that length may be the
// cut one. Flagging every list of 50 or more, a node listing 120 images under
// a raised cap alerted with reason "truncated" at 80 % of the threshold, its
// note telling the operator to raise the limit they had raised.
func TestImageListLongerThanTheDefaultCapIsComplete(t *testing.T) {
	for _, tc := range []struct {
		images, maxImages int
		truncated         bool
	}{
		{120, events.KubeletImageListLimit, false}, // a raised kubelet cap, the watcher's left at 50
		{50, events.KubeletImageListLimit, true},
		{49, events.KubeletImageListLimit, false},
		{120, 200, false},
		{200, 200, true},
		{500, -1, false}, // no cap
	} {
		n := &corev1.Node{}
		for i := 0; i < tc.images; i++ {
			n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{fmt.Sprintf("img-%d", i)}, SizeBytes: 1 << 30})
		}
		if s := NodeState(n, tc.maxImages); s.ImagesTruncated != tc.truncated || s.ImageCount != tc.images {
			t.Errorf("%d images under a cap of %d: imagesTruncated %v (count %d), want %v",
				tc.images, tc.maxImages, s.ImagesTruncated, s.ImageCount, tc.truncated)
		}
	}
}

package harness

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sizeBand is what a real object of the kind weighs in protobuf, the
// encoding of a LIST's items: a kubelet's node with 50 images is ~12.7 KB
// (a 5,000-node LIST of 63.5 MB), a Deployment's running pod a few KB.
type sizeBand struct{ min, max int }

var (
	nodeBand50 = sizeBand{8 << 10, 20 << 10}
	podBand    = sizeBand{2 << 10, 10 << 10}
)

func (b sizeBand) check(t *testing.T, what string, size int) {
	t.Helper()
	if size < b.min || size > b.max {
		t.Errorf("%s is %d bytes of protobuf, want %d..%d", what, size, b.min, b.max)
	}
}

// TestRealSizeObjectsWeighWhatRealOnesDo: the real-size builders make
// objects of a real cluster's size, growing with the images a kubelet
// reports, each its own (derived from the name, the same for the same
// name).
func TestRealSizeObjectsWeighWhatRealOnesDo(t *testing.T) {
	for _, tc := range []struct {
		name      string
		obj       interface{ Size() int }
		band      sizeBand
		imagesLen int // for nodes: how many images the status lists
	}{
		{"node with a kubelet's 50 images", RealSizeNode("ip-10-20-30-40.eu-west-1.compute.internal", KubeletMaxImages), nodeBand50, 50},
		{"node with 10 images", RealSizeNode("n-10", 10), sizeBand{3 << 10, 6 << 10}, 10},
		{"node with no image", RealSizeNode("n-0", 0), sizeBand{1 << 10, 4 << 10}, 0},
		{"running pod of a Deployment", RealSizePod("payments", "api-7d9f8b6c5d-x2x9k", "n-1"), podBand, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.obj.Size()
			t.Logf("%d bytes", size)
			tc.band.check(t, tc.name, size)
			if n, ok := tc.obj.(*corev1.Node); ok && len(n.Status.Images) != tc.imagesLen {
				t.Errorf("%d images, want %d", len(n.Status.Images), tc.imagesLen)
			}
		})
	}
	t.Run("node is a kubelet's", func(t *testing.T) {
		n := RealSizeNode("n-1", KubeletMaxImages)
		if len(n.Labels) < 20 || len(n.Status.Conditions) != 5 || n.Status.NodeInfo.KubeletVersion != KubeVersion ||
			len(n.Status.Addresses) < 2 || n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
			t.Fatalf("not a kubelet's node: %d labels, %d conditions, kubelet %q, addresses %v",
				len(n.Labels), len(n.Status.Conditions), n.Status.NodeInfo.KubeletVersion, n.Status.Addresses)
		}
		for i := 1; i < len(n.Status.Images); i++ {
			if n.Status.Images[i].SizeBytes > n.Status.Images[i-1].SizeBytes {
				t.Fatalf("images not the largest first, as a kubelet reports them: %d after %d",
					n.Status.Images[i].SizeBytes, n.Status.Images[i-1].SizeBytes)
			}
		}
	})
	t.Run("derived from the name", func(t *testing.T) {
		a, b := RealSizeNode("n-1", 5), RealSizeNode("n-1", 5)
		b.Status.Conditions, a.Status.Conditions = nil, nil // heartbeats are now
		if !equality.Semantic.DeepEqual(a, b) {
			t.Fatal("two nodes of one name differ")
		}
		if RealSizeNode("n-2", 5).Status.NodeInfo.MachineID == a.Status.NodeInfo.MachineID {
			t.Fatal("two nodes share a machine ID")
		}
		p, q := RealSizePod("ns", "a", "n-1"), RealSizePod("ns", "b", "n-1")
		if p.Status.PodIP == q.Status.PodIP && p.Status.ContainerStatuses[0].ContainerID == q.Status.ContainerStatuses[0].ContainerID {
			t.Fatal("two pods share IP and container ID")
		}
		if p.Status.HostIP != RealSizeNode("n-1", 0).Status.Addresses[0].Address {
			t.Fatalf("pod's hostIP %s is not its node's InternalIP", p.Status.HostIP)
		}
	})
}

// TestRealSizeObjectsRoundTripThroughAPIServer: the real API server
// accepts a real-size node and pod (validation, admission) and keeps their
// status; as served, with the managed fields of "kubelet" and
// "kube-controller-manager", they stay in the band.
func TestRealSizeObjectsRoundTripThroughAPIServer(t *testing.T) {
	cp := StartControlPlane(t)
	ctx := context.Background()
	want := RealSizeNode("ip-10-20-30-40.eu-west-1.compute.internal", KubeletMaxImages)
	CreateRealSizeNode(t, cp.Client, want)
	got, err := cp.Client.CoreV1().Nodes().Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(got.Status, want.Status) {
		t.Fatalf("node status not kept:\nwant %+v\ngot  %+v", want.Status, got.Status)
	}
	if !equality.Semantic.DeepEqual(got.Labels, want.Labels) || got.Spec.ProviderID != want.Spec.ProviderID {
		t.Fatalf("node labels or spec not kept: %v %q", got.Labels, got.Spec.ProviderID)
	}
	t.Logf("node as served: %d bytes (%d without managed fields)", got.Size(), sizeWithoutManagedFields(got))
	nodeBand50.check(t, "node as served", got.Size())

	CreateNamespace(t, cp.Client, "payments")
	p := RealSizePod("payments", "api-7d9f8b6c5d-x2x9k", want.Name)
	CreateRealSizePod(t, cp.Client, p)
	gotPod, err := cp.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(gotPod.Status, p.Status) {
		t.Fatalf("pod status not kept:\nwant %+v\ngot  %+v", p.Status, gotPod.Status)
	}
	if !equality.Semantic.DeepEqual(gotPod.Spec.Containers, p.Spec.Containers) || len(gotPod.Spec.Tolerations) != 2 {
		t.Fatalf("pod spec changed by the API server:\nwant %+v\ngot  %+v", p.Spec, gotPod.Spec)
	}
	t.Logf("pod as served: %d bytes (%d without managed fields)", gotPod.Size(), sizeWithoutManagedFields(gotPod))
	podBand.check(t, "pod as served", gotPod.Size())
}

func sizeWithoutManagedFields[T interface {
	metav1.Object
	Size() int
}](o T) int {
	mf := o.GetManagedFields()
	o.SetManagedFields(nil)
	defer o.SetManagedFields(mf)
	return o.Size()
}

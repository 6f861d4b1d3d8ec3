package harness

import (
	"context"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKeepNodesAliveRenewsOnlyFakeReachableNodes: the harness renews the
// Lease of a fake node as its kubelet would (held by it, owned by the
// Node), not that of a node annotated unreachable, nor that of a node
// whose Lease a real kubelet writes; MakeUnreachable and MakeReachable
// stop and resume the renewals.
func TestKeepNodesAliveRenewsOnlyFakeReachableNodes(t *testing.T) {
	cp := StartControlPlane(t)
	c := cp.Client
	ctx := context.Background()
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	lease := func(name string) *coordv1.Lease {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// renewed waits for the node's Lease to be renewed after now.
	renewed := func(name string) {
		t.Helper()
		since := time.Now()
		Eventually(t, 10*time.Second, name+"'s Lease renewed", func() bool {
			l := lease(name)
			return l != nil && l.Spec.RenewTime.After(since)
		})
	}

	fake := CreateNode(t, c, Node("fake", nil))
	silent := Node("silent", nil)
	silent.Annotations = map[string]string{UnreachableAnnotation: "true"}
	CreateNode(t, c, silent)
	CreateNode(t, c, Node("kubelet", nil))
	holder, secs, now := "kubelet", int32(40), metav1.NewMicroTime(time.Now())
	kubelets, err := leases.Create(ctx, &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kubelet", Namespace: corev1.NamespaceNodeLease},
		Spec:       coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now},
	}, metav1.CreateOptions{FieldManager: "kubelet"})
	if err != nil {
		t.Fatal(err)
	}

	r := cp.KeepNodesAlive(t, 100*time.Millisecond)
	// afterRounds waits until two rounds ended: one that began after now.
	afterRounds := func() {
		t.Helper()
		n := r.rounds.Load()
		Eventually(t, 10*time.Second, "two renewal rounds", func() bool { return r.rounds.Load() >= n+2 })
	}
	renewed("fake")
	afterRounds()
	l := lease("fake")
	if *l.Spec.HolderIdentity != "fake" || len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != fake.UID {
		t.Fatalf("fake's Lease is not a kubelet's: holder %q, owners %v", *l.Spec.HolderIdentity, l.OwnerReferences)
	}
	if lease("silent") != nil {
		t.Fatal("a Lease for the node annotated unreachable")
	}
	if got := lease("kubelet"); got.ResourceVersion != kubelets.ResourceVersion {
		t.Fatalf("the real kubelet's Lease was written: renewTime %v", got.Spec.RenewTime)
	}

	MakeUnreachable(t, c, "fake")
	afterRounds()
	stopped := lease("fake").ResourceVersion
	Never(t, time.Second, "fake's Lease renewed while unreachable", func() bool {
		return lease("fake").ResourceVersion != stopped
	})
	MakeReachable(t, c, "fake")
	renewed("fake")
}

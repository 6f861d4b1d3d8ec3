package e2e

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opswire/opswire/shared/kube"
	"github.com/opswire/opswire/test/harness"
)

// TestDeleteConflictTexts: cleanup tells a DELETE's 409 that stored nothing
// (a quiet re-look) from one after its deletion mark committed (in doubt)
// by the API server's texts (kube.DeleteConflictBeforeStore). They are the
// real API server's: a pod DELETE with a stale resourceVersion, or another
// UID, as its precondition is answered 409 in a text it recognizes, and the
// pod is left as it was (no deletion mark), whatever the grace period asked.
func TestDeleteConflictTexts(t *testing.T) {
	cp := harness.StartControlPlane(t)
	c := cp.Client
	ctx := context.Background()
	const ns = "conflicts"
	harness.CreateNamespace(t, c, ns)
	p, err := c.CoreV1().Pods(ns).Create(ctx, harness.Pod(ns, "web-1", "node-a"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := p.ResourceVersion
	p.Labels = map[string]string{"touched": "yes"}
	if p, err = c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	other, zero, thirty := types.UID("another-uid"), int64(0), int64(30)
	tests := []struct {
		name  string
		pre   metav1.Preconditions
		grace *int64
		sent  string // the resourceVersion the DELETE carries
	}{
		{"stale resourceVersion, grace 0", metav1.Preconditions{ResourceVersion: &stale}, &zero, stale},
		{"stale resourceVersion, grace 30", metav1.Preconditions{ResourceVersion: &stale}, &thirty, stale},
		{"another UID", metav1.Preconditions{UID: &other}, &zero, p.ResourceVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conflict := c.CoreV1().Pods(ns).Delete(ctx, "web-1", metav1.DeleteOptions{Preconditions: &tc.pre, GracePeriodSeconds: tc.grace})
			if !apierrors.IsConflict(conflict) {
				t.Fatalf("DELETE with precondition %+v: %v, want 409", tc.pre, conflict)
			}
			if !kube.DeleteConflictBeforeStore(conflict, tc.sent) {
				t.Fatalf("the API server's 409 %q is not recognized as one that stored nothing", conflict)
			}
			live, err := c.CoreV1().Pods(ns).Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil || live.DeletionTimestamp != nil || live.ResourceVersion != p.ResourceVersion {
				t.Fatalf("after the 409: %v, deletionTimestamp %v, rv %s (was %s); want the pod untouched", err, live.DeletionTimestamp, live.ResourceVersion, p.ResourceVersion)
			}
			t.Logf("409: %v", conflict)
		})
	}
}

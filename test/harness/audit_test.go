package harness

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestAuditLog: WithAuditLog records node patches with the node as it
// stands after them, and pod deletes with their preconditions, grace period
// and the deleted pod; reads are not logged.
func TestAuditLog(t *testing.T) {
	cp := StartControlPlane(t, WithAuditLog())
	c, ctx := cp.Client, context.Background()
	CreateNode(t, c, Node("audit-n1", nil))
	if _, err := c.CoreV1().Nodes().Patch(ctx, "audit-n1", types.MergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	p := CreatePod(t, c, Pod("default", "audit-p1", "audit-n1"))
	zero := int64(0)
	uid := p.UID
	if err := c.CoreV1().Pods("default").Delete(ctx, "audit-p1", metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, "audit-n1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	var entries []AuditEntry
	Eventually(t, 10e9, "the delete in the audit log", func() bool {
		var err error
		entries, err = ReadAuditLog(cp.AuditLog)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Verb == "delete" && e.Resource == "pods" && e.Name == "audit-p1" {
				return true
			}
		}
		return false
	})
	var patched, deleted bool
	for _, e := range entries {
		if e.Verb == "get" || e.Verb == "list" || e.Verb == "watch" {
			t.Errorf("a read was logged: %+v", e)
		}
		switch {
		case e.Verb == "patch" && e.Resource == "nodes" && e.Name == "audit-n1" && e.Subresource == "":
			o := e.ResponseObject()
			if o == nil || !o.Spec.Unschedulable || o.RV() == 0 || e.Code != 200 || e.User != "admin" {
				t.Errorf("node patch: code %d user %q object %+v", e.Code, e.User, o)
			}
			patched = true
		case e.Verb == "delete" && e.Resource == "pods" && e.Name == "audit-p1":
			o := e.ResponseObject()
			if e.UIDPrecondition != string(uid) || e.GracePeriod == nil || *e.GracePeriod != 0 || !e.Succeeded() ||
				o == nil || o.Metadata.UID != string(uid) || o.Spec.NodeName != "audit-n1" || e.Namespace != "default" {
				t.Errorf("pod delete: %+v, object %+v", e, o)
			}
			if e.Received.IsZero() || e.Completed.Before(e.Received) {
				t.Errorf("timestamps: %v %v", e.Received, e.Completed)
			}
			deleted = true
		}
	}
	if !patched || !deleted {
		t.Fatalf("patch logged %v, delete logged %v, of %d entries", patched, deleted, len(entries))
	}
}

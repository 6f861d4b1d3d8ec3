package kube

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestDeleteConflictBeforeStore: the API server's texts of a DELETE's 409
// before anything was stored, against the second step's (after the mark)
// and a 409 that names no precondition.
func TestDeleteConflictBeforeStore(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	conflict := func(msg string) error { return apierrors.NewConflict(pods, "web-1", errors.New(msg)) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"early UID check", conflict("the UID in the precondition (uid-1) does not match the UID in record (uid-2). The object might have been deleted and then recreated"), true},
		{"early resourceVersion check", conflict("the ResourceVersion in the precondition (7) does not match the ResourceVersion in record (8). The object might have been modified"), true},
		{"first step, UID", conflict("Precondition failed: UID in precondition: uid-1, UID in object meta: uid-2"), true},
		{"first step, the resourceVersion sent", conflict("Precondition failed: ResourceVersion in precondition: 7, ResourceVersion in object meta: 8"), true},
		{"second step: the mark's resourceVersion", conflict("Precondition failed: ResourceVersion in precondition: 8, ResourceVersion in object meta: 9"), false},
		{"a resourceVersion that only starts with the one sent", conflict("Precondition failed: ResourceVersion in precondition: 77, ResourceVersion in object meta: 78"), false},
		{"no precondition named", conflict("the object has been modified"), false},
		{"no error", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DeleteConflictBeforeStore(tc.err, "7"); got != tc.want {
				t.Fatalf("DeleteConflictBeforeStore(%v, 7) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

package harness

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// LeaseHolder is the identity holding a Lease, or "" when the Lease is free,
// absent or cannot be read: tests poll it while a leader changes, and a read
// that fails then simply means "no holder seen yet".
func LeaseHolder(c kubernetes.Interface, namespace, name string) string {
	l, err := c.CoordinationV1().Leases(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// WaitLeader waits until one of procs (by --id) holds the Lease and is ready,
// and returns its id and process. Ready matters: a new leader answers /readyz
// only once its mirror is loaded, so a test acting before that would race it.
func WaitLeader(t testing.TB, c kubernetes.Interface, namespace, lease string, procs map[string]*Process) (string, *Process) {
	t.Helper()
	var id string
	Eventually(t, 30*time.Second, "a leader holding "+namespace+"/"+lease, func() bool {
		id = LeaseHolder(c, namespace, lease)
		p := procs[id]
		return p != nil && p.Ready()
	})
	return id, procs[id]
}

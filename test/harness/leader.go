package harness

import (
	"context"

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

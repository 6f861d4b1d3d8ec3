// Package e2e proves every opswire service end to end against real parts:
// kube-apiserver + etcd, nats-server with JetStream, and the service binaries
// as separate processes (see package harness).
package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/test/harness"
)

// TestHarnessControlPlane checks the harness itself: a real API server that
// stores objects and enforces RBAC for ServiceAccount tokens.
func TestHarnessControlPlane(t *testing.T) {
	cp := harness.StartControlPlane(t)
	node := harness.CreateNode(t, cp.Client, harness.Node("harness-node", nil))
	if node.Status.Allocatable.Pods().Value() != 110 {
		t.Fatalf("node status not written: %+v", node.Status.Allocatable)
	}
	sa := cp.ServiceAccountKubeconfig(t, "default", "nobody")
	client := kubeClient(t, sa)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("a ServiceAccount without RBAC could list nodes")
	}
}

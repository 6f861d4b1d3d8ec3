package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// cordonRBAC grants a ServiceAccount exactly what opswire-cordon needs and
// returns a kubeconfig for it, so the e2e runs prove the least-privilege
// rules are enough (docs/cordon.md lists the same rules).
func cordonRBAC(t *testing.T, cp *harness.ControlPlane, leaseNamespace string) string {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "opswire-cordon"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "list", "patch"}},
		},
	}
	leaseRole := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "opswire-cordon-lease", Namespace: leaseNamespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		},
	}
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "opswire-cordon", Namespace: leaseNamespace}}
	rb := cp.Client.RbacV1()
	cordonMust(t, func() error { _, err := rb.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); return err })
	cordonMust(t, func() error {
		_, err := rb.Roles(leaseNamespace).Create(ctx, leaseRole, metav1.CreateOptions{})
		return err
	})
	cordonMust(t, func() error {
		_, err := rb.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "opswire-cordon"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		}, metav1.CreateOptions{})
		return err
	})
	cordonMust(t, func() error {
		_, err := rb.RoleBindings(leaseNamespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "opswire-cordon-lease", Namespace: leaseNamespace}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: leaseRole.Name},
		}, metav1.CreateOptions{})
		return err
	})
	return cp.ServiceAccountKubeconfig(t, leaseNamespace, "opswire-cordon")
}

func cordonMust(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

// fillNode creates count running pods on a node, named <node>-p<i> from start.
func cordonFill(t *testing.T, c kubernetes.Interface, node string, start, count int) {
	t.Helper()
	for i := start; i < start+count; i++ {
		harness.CreatePod(t, c, harness.Pod("default", fmt.Sprintf("%s-p%d", node, i), node))
	}
}

// drainPods deletes pods <node>-p<i> for i in [from, to) at once (grace 0:
// there is no kubelet to finish a graceful deletion).
func cordonDrain(t *testing.T, c kubernetes.Interface, node string, from, to int) {
	t.Helper()
	zero := int64(0)
	for i := from; i < to; i++ {
		err := c.CoreV1().Pods("default").Delete(context.Background(), fmt.Sprintf("%s-p%d", node, i),
			metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func cordonMarked(n *corev1.Node) bool {
	_, ok := n.Labels[events.LabelAutoCordon]
	return ok
}

// decision decodes a collected OPS message.
func cordonDecision(t *testing.T, m harness.Msg) events.CordonDecision {
	t.Helper()
	var d events.CordonDecision
	if err := json.Unmarshal(m.Data, &d); err != nil {
		t.Fatalf("%s: %v", m.Subject, err)
	}
	return d
}

// isCordonOutcome: an OPS message of cordon's decisions, not one of its
// write-ahead intents (ops.<cluster>.cordon.intent.>, checked by
// TestCordonKillAfterPatch).
func isCordonOutcome(m harness.Msg) bool { return !strings.Contains(m.Subject, ".cordon.intent.") }

// cordonMsgs returns the cordon decisions collected for one node and verb
// ("" = any verb).
func cordonMsgs(t *testing.T, ops *harness.Collector, cluster, node, verb string) []events.CordonDecision {
	t.Helper()
	var out []events.CordonDecision
	for _, m := range ops.All() {
		if !strings.HasPrefix(m.Subject, "ops."+cluster+".cordon.") || !isCordonOutcome(m) {
			continue
		}
		d := cordonDecision(t, m)
		if d.Node == node && (verb == "" || d.Verb == verb) {
			out = append(out, d)
		}
	}
	return out
}

// nodeEvents lists the Kubernetes Events recorded on a node with a reason.
func cordonEvents(t *testing.T, c kubernetes.Interface, node, reason string) []corev1.Event {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node, "reason": reason}.AsSelector().String()
	list, err := c.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// cordonEventCount counts how often opswire recorded an Event with a reason
// on a node.
func cordonEventCount(t *testing.T, c kubernetes.Interface, node, reason string) int {
	t.Helper()
	n := 0
	for _, ev := range cordonEvents(t, c, node, reason) {
		n += harness.Recorded(ev)
	}
	return n
}

// reconciles reads the cordon process's reconcile counter.
func cordonReconciles(p *harness.Process) float64 { return p.Metric("opswire_cordon_reconciles_total") }

// waitReconciled waits until the cordon process has run at least n more
// reconciliations than before: a sync point that proves it looked again.
func cordonWaitReconciled(t *testing.T, p *harness.Process, before float64, n int) {
	t.Helper()
	harness.Eventually(t, 20*time.Second, fmt.Sprintf("%d more reconciliations", n), func() bool {
		return cordonReconciles(p) >= before+float64(n)
	})
}

// cordonPair starts cordon replicas r1 and r2 and returns them with the ids
// of the one that leads and of the standby.
func cordonPair(t *testing.T, cp *harness.ControlPlane, n *harness.NATS, cfg, kubeconfig string) (replicas map[string]*harness.Process, leader, standby string) {
	t.Helper()
	replicas = map[string]*harness.Process{}
	for _, id := range []string{"r1", "r2"} {
		replicas[id] = harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: id})
	}
	for _, p := range replicas {
		p.WaitReady(t, 60*time.Second)
	}
	harness.Eventually(t, 10*time.Second, "a leader", func() bool {
		leader = harness.LeaseHolder(cp.Client, "default", "opswire-cordon")
		return replicas[leader] != nil && replicas[leader].Metric("opswire_leader") == 1
	})
	standby = "r1"
	if leader == "r1" {
		standby = "r2"
	}
	return replicas, leader, standby
}

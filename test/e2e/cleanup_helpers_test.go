package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// cleanupConfig is the test configuration: cluster e2e, a fast lease, a 1 s
// tick, a 4 s terminatingTimeout, and extra delException lines.
func cleanupConfig(extra ...string) string {
	var b strings.Builder
	b.WriteString(`
cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
delException:
  interval: 1s
  minAge: 0s
  terminatingTimeout: 4s
  namespaces:
    exclude: [protected]
`)
	for _, l := range extra {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// cleanupKubeconfig returns a kubeconfig for a ServiceAccount holding only the
// permissions docs/cleanup.md lists, so the tests prove that RBAC is enough.
func cleanupKubeconfig(t *testing.T, cp *harness.ControlPlane) string {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "opswire-cleanup"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "delete", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "list", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		},
	}
	if _, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "opswire-cleanup"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "opswire-cleanup"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: "opswire-cleanup"}},
	}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return cp.ServiceAccountKubeconfig(t, "default", "opswire-cleanup")
}

func startCleanup(t *testing.T, n *harness.NATS, cfg, kubeconfig, id string, args ...string) *harness.Process {
	t.Helper()
	return harness.StartService(t, "cleanup", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: id, Args: args})
}

// evict writes the status a kubelet writes for an evicted pod.
func evict(t *testing.T, cp *harness.ControlPlane, p *corev1.Pod) {
	t.Helper()
	harness.SetPodStatus(t, cp.Client, p, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	})
}

// deleteGracefully deletes a bound pod with a 1 s grace period; without a
// kubelet it stays Terminating. It returns the live deletionTimestamp.
func deleteGracefully(t *testing.T, cp *harness.ControlPlane, ns, name string) time.Time {
	t.Helper()
	ctx := context.Background()
	one := int64(1)
	if err := cp.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("%s/%s not Terminating after delete: %v", ns, name, err)
	}
	return p.DeletionTimestamp.Time
}

// decision decodes a cleanup OPS message.
func decision(t *testing.T, m harness.Msg) events.CleanupDecision {
	t.Helper()
	if m.Type != events.TypeCleanup {
		t.Fatalf("%s: ce-type %q", m.Subject, m.Type)
	}
	var d events.CleanupDecision
	if err := json.Unmarshal(m.Data, &d); err != nil {
		t.Fatalf("%s: %v", m.Subject, err)
	}
	return d
}

// opsFor matches the cleanup decision with the given verb about one pod.
func opsFor(verb, ns, pod string) func(harness.Msg) bool {
	subj := fmt.Sprintf("ops.e2e.cleanup.%s.%s.%s", verb, ns, pod)
	return func(m harness.Msg) bool { return m.Subject == subj }
}

// cleanupEvents lists the reasons of the Kubernetes Events opswire-cleanup
// wrote about one pod UID, each as often as it was recorded.
func cleanupEvents(t *testing.T, cp *harness.ControlPlane, ns, uid string) []string {
	t.Helper()
	list, err := cp.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if string(e.InvolvedObject.UID) == uid && e.Source.Component == "opswire-cleanup" {
			for range harness.Recorded(e) {
				out = append(out, e.Reason)
			}
		}
	}
	return out
}

// publishCounter counts, on a plain core-NATS subscription, every cleanup
// outcome published (the intent verb left out), by subject: unlike the OPS
// stream, which drops a repeated Nats-Msg-Id for minutes, it sees each publish.
type publishCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// countPublishes subscribes to ops.<cluster>.cleanup.> (start it before the actor).
func countPublishes(t *testing.T, n *harness.NATS, cluster string) *publishCounter {
	t.Helper()
	nc := n.Connect(t)
	c := &publishCounter{n: map[string]int{}}
	if _, err := nc.Subscribe("ops."+cluster+".cleanup.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, ".cleanup.intent.") {
			return
		}
		c.mu.Lock()
		c.n[m.Subject]++
		c.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// Counts is a copy of the publishes so far, by subject.
func (c *publishCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// podDeletes counts the pod DELETEs sent through proxy, by "<namespace>/<name>",
// whatever the answer (at the source: a repeat is seen even when answered 404).
func podDeletes(proxy *harness.APIProxy, ns string) map[string]int {
	out := map[string]int{}
	for _, r := range proxy.Requests(func(r harness.APIRequest) bool { return r.Method == http.MethodDelete }) {
		// /api/v1/namespaces/<ns>/pods/<name>
		parts := strings.Split(strings.Trim(r.Path, "/"), "/")
		if len(parts) == 6 && parts[3] == ns && parts[4] == "pods" {
			out[ns+"/"+parts[5]]++
		}
	}
	return out
}

// denyPodDeletes installs a ValidatingAdmissionPolicy refusing DELETE of pods
// carrying label, and waits until the API server enforces it: a real refused
// write, for the failure path.
func denyPodDeletes(t *testing.T, cp *harness.ControlPlane, label string) {
	t.Helper()
	ctx := context.Background()
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-deny-pod-delete"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!has(oldObject.metadata.labels) || !(%q in oldObject.metadata.labels)", label),
				Message:    "deletes of labelled pods are refused by the e2e test",
			}},
		},
	}
	if _, err := cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-deny-pod-delete"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	if _, err := cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := harness.Pod("default", "deny-probe", "")
	probe.Labels = map[string]string{label: "true"}
	harness.CreatePod(t, cp.Client, probe)
	harness.Eventually(t, 20*time.Second, "admission policy enforced", func() bool {
		err := cp.Client.CoreV1().Pods("default").Delete(ctx, "deny-probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
	})
}

// allowPodDeletes removes the policy binding of denyPodDeletes and waits until
// deletes pass again.
func allowPodDeletes(t *testing.T, cp *harness.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	if err := cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "e2e-deny-pod-delete", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 20*time.Second, "admission policy lifted", func() bool {
		return cp.Client.CoreV1().Pods("default").Delete(ctx, "deny-probe", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}) == nil
	})
}

// taintNode adds a taint to a node (a person or a fencing controller would).
func taintNode(t *testing.T, cp *harness.ControlPlane, name string, taint corev1.Taint) {
	t.Helper()
	harness.UpdateNode(t, cp.Client, name, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, taint) })
}

// setNodeReady sets a node's Ready condition (as the node lifecycle
// controller would when a kubelet stops or resumes reporting).
func setNodeReady(t *testing.T, cp *harness.ControlPlane, name string, status corev1.ConditionStatus) {
	t.Helper()
	harness.SetNodeStatus(t, cp.Client, name, func(s *corev1.NodeStatus) {
		s.Conditions[0].Status, s.Conditions[0].LastTransitionTime = status, metav1.Now()
	})
}

// isOutcome: an OPS message of cleanup's decisions, not one of its
// write-ahead intents (ops.<cluster>.cleanup.intent.>, checked by
// TestCleanupFailover).
func isOutcome(m harness.Msg) bool { return !strings.Contains(m.Subject, ".cleanup.intent.") }

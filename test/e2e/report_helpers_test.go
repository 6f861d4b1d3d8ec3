package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// reportConfig is the test configuration shared by the watcher and the report
// replicas: cluster e2e, a fast lease in "default", then the given sections.
func reportConfig(sections string) string {
	return `
cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
` + sections
}

// reportKubeconfig is a ServiceAccount holding only what docs/report.md
// lists (the Lease), so the tests prove that RBAC is enough.
func reportKubeconfig(t *testing.T, cp *harness.ControlPlane, ns string) string {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opswire-report"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			Verbs: []string{"get", "create", "update"}}},
	}
	if _, err := cp.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "opswire-report"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "opswire-report"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: "opswire-report"}},
	}
	if _, err := cp.Client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return cp.ServiceAccountKubeconfig(t, ns, "opswire-report")
}

func startReport(t *testing.T, n *harness.NATS, cfg, kubeconfig, id string) *harness.Process {
	t.Helper()
	p := harness.StartService(t, "report", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: id})
	p.WaitReady(t, 60*time.Second)
	return p
}

// restartingPod creates a pod on node whose one container restarted
// `restarts` times, last killed for OOM, as a kubelet would report it.
func restartingPod(t *testing.T, cp *harness.ControlPlane, ns, name, node string, restarts int32) *corev1.Pod {
	t.Helper()
	p := harness.CreatePod(t, cp.Client, harness.Pod(ns, name, node))
	return setRestarts(t, cp, p, restarts)
}

func setRestarts(t *testing.T, cp *harness.ControlPlane, p *corev1.Pod, restarts int32) *corev1.Pod {
	t.Helper()
	return harness.SetPodStatus(t, cp.Client, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "app", Image: "registry.invalid/app:1", ImageID: "app@sha256:0", Ready: true, RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "OOMKilled", ExitCode: 137, FinishedAt: metav1.Now(),
			}},
		}}
	})
}

// waitRestarts waits until KUBE mirrors the pod's restart count.
func waitRestarts(t *testing.T, n *harness.NATS, cluster, ns, name string, restarts int64) {
	t.Helper()
	harness.Eventually(t, 15*time.Second, fmt.Sprintf("%s/%s with %d restarts in KUBE", ns, name, restarts), func() bool {
		s := lastPod(t, n.JS, subject.Pod(cluster, ns, name))
		return s != nil && s.Restarts() == restarts
	})
}

func restartReport(t *testing.T, m harness.Msg) events.RestartReport {
	t.Helper()
	var r events.RestartReport
	if _, err := envelope.Decode(m.Header, m.Data, events.TypeRestartReport, &r); err != nil {
		t.Fatalf("report %s does not decode: %v", m.ID, err)
	}
	return r
}

func reports(t *testing.T, ops *harness.Collector) []events.RestartReport {
	t.Helper()
	var out []events.RestartReport
	for _, m := range ops.All() {
		if m.Type == events.TypeRestartReport {
			out = append(out, restartReport(t, m))
		}
	}
	return out
}

func scheduledReports(t *testing.T, ops *harness.Collector) []events.RestartReport {
	t.Helper()
	var out []events.RestartReport
	for _, r := range reports(t, ops) {
		if !r.OnDemand {
			out = append(out, r)
		}
	}
	return out
}

// requestReport asks the leader for an on-demand report and returns its id.
func requestReport(t *testing.T, n *harness.NATS, cluster string) string {
	t.Helper()
	var reply struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	var m *nats.Msg
	// "No responders" is the answer while no replica leads yet; a client retries.
	harness.Eventually(t, 20*time.Second, "an answer to the report request", func() bool {
		var err error
		m, err = n.Conn.Request(subject.Ctl(cluster, "report", "run"), nil, 20*time.Second)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("report request: %v", err)
		}
		return err == nil
	})
	if err := json.Unmarshal(m.Data, &reply); err != nil || reply.ID == "" || reply.Error != "" {
		t.Fatalf("report reply %q (%v)", m.Data, err)
	}
	return reply.ID
}

// seedConfig returns the seed's config.yml, byte for byte.
func seedConfig(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "shared", "config", "testdata", "seed.yml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// setImages writes a kubelet-like image list: count images of size bytes each.
func setImages(t *testing.T, cp *harness.ControlPlane, node string, count int, size int64) {
	t.Helper()
	harness.SetNodeStatus(t, cp.Client, node, func(s *corev1.NodeStatus) {
		s.Images = make([]corev1.ContainerImage, count)
		for i := range s.Images {
			s.Images[i] = corev1.ContainerImage{Names: []string{fmt.Sprintf("registry.invalid/img-%d:1", i)}, SizeBytes: size}
		}
	})
}

func imageAlerts(t *testing.T, ops *harness.Collector) []events.ImageAlert {
	t.Helper()
	var out []events.ImageAlert
	for _, m := range ops.All() {
		if m.Type != events.TypeImageAlert {
			continue
		}
		var a events.ImageAlert
		if _, err := envelope.Decode(m.Header, m.Data, events.TypeImageAlert, &a); err != nil {
			t.Fatalf("image alert %s does not decode: %v", m.ID, err)
		}
		out = append(out, a)
	}
	return out
}

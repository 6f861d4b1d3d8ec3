package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/test/harness"
)

// TestCleanupFailureTimeNeverPrecedesCreation: the failure time of a Failed
// pod is written on its kubelet's clock, and a node clock 2 h behind makes a
// pod created a moment ago look failed 2 h ago. With minAge 10m, such a pod
// (its container finished "2 h" before the API server created it) is not
// deleted: its failure time is never earlier than its creationTimestamp. The
// control, a pod stuck Terminating in the same namespace, is force-deleted
// meanwhile, so cleanup did look at the namespace.
func TestCleanupFailureTimeNeverPrecedesCreation(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "skew")
	cfg := harness.WriteConfig(t, strings.Replace(cleanupConfig(), "minAge: 0s", "minAge: 10m", 1))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")

	behind := harness.CreatePod(t, cp.Client, harness.Pod("skew", "behind-0", worker.Name))
	twoHoursAgo := metav1.NewTime(time.Now().Add(-2 * time.Hour))
	harness.SetPodStatus(t, cp.Client, behind, func(s *corev1.PodStatus) {
		s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.invalid/app:1",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error",
				StartedAt: twoHoursAgo, FinishedAt: twoHoursAgo}}}}
	})
	harness.CreatePod(t, cp.Client, harness.Pod("skew", "stuck-0", worker.Name))
	deleteGracefully(t, cp, "skew", "stuck-0")

	startCleanup(t, n, cfg, cleanupKubeconfig(t, cp), "a").WaitReady(t, 60*time.Second)
	ops.WaitFor(t, 30*time.Second, "the control force-deleted", harness.Subject("ops.e2e.cleanup.forcedeleted.skew.stuck-0"))
	harness.Never(t, 10*time.Second, "behind-0 deleted within minAge of its creation", func() bool {
		return !harness.PodExists(t, cp.Client, "skew", "behind-0") || ops.Count(harness.Subject("ops.e2e.cleanup.deleted.skew.behind-0")) > 0
	})
}

package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/test/harness"
)

// TestCleanupHoldsInlineVolumePodOnUnknownNode: a pod with an inline iSCSI
// volume (no claim) stuck Terminating on a node the real node lifecycle
// controller turned Unknown is still there 15 s past its deadline, reported
// NodeNotConfirmedDown, while a plain pod stuck beside it is force-deleted.
// Force-deleting the first would let the attach/detach controller detach its
// disk by force (6 min after the pod left the API, the node being unhealthy)
// and a replacement attach it while the partitioned node may still write.
func TestCleanupHoldsInlineVolumePodOnUnknownNode(t *testing.T) {
	started := time.Now()
	cp := harness.StartControlPlane(t)
	c := cp.Client
	harness.CreateNamespace(t, c, "apps")
	// Four nodes: one Unknown stays under the mass-failure brake's third.
	for _, name := range []string{"lost", "spare-1", "spare-2", "spare-3"} {
		harness.CreateNode(t, c, harness.Node(name, nil))
	}
	cp.StartControllers(t, harness.ControllerOptions{
		Controllers:            []string{"node-lifecycle-controller"},
		NodeMonitorPeriod:      time.Second,
		NodeMonitorGracePeriod: 5 * time.Second,
	})
	n := harness.StartNATS(t)
	cfg := harness.WriteConfig(t, cleanupConfig())
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	cleanup := startCleanup(t, n, cfg, cleanupKubeconfig(t, cp), "a")
	harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", map[string]*harness.Process{"a": cleanup})

	harness.MakeUnreachable(t, c, "lost")
	harness.Eventually(t, 30*time.Second, "node lost Ready=Unknown (node lifecycle controller)", func() bool {
		return harness.NodeReady(harness.GetNode(t, cp.Client, "lost")) == corev1.ConditionUnknown
	})
	iscsi := harness.Pod("apps", "iscsi-0", "lost")
	iscsi.Spec.Volumes = []corev1.Volume{{Name: "lun", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{
		TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage.disk1", Lun: 0, FSType: "ext4"}}}}
	iscsi.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "lun", MountPath: "/data"}}
	held := harness.CreatePod(t, c, iscsi)
	plain := harness.CreatePod(t, c, harness.Pod("apps", "plain-0", "lost"))
	deleteGracefully(t, cp, "apps", plain.Name)
	deadline := deleteGracefully(t, cp, "apps", held.Name).Add(4 * time.Second) // terminatingTimeout

	harness.Eventually(t, time.Until(deadline)+10*time.Second, "the plain pod on the Unknown node force-deleted", func() bool {
		return !uidExists(t, cp, plain)
	})
	if d := decision(t, ops.WaitFor(t, 5*time.Second, "forcedeleted plain-0", outcomeOf(plain, "forcedeleted"))); d.Reason != "StuckTerminating" {
		t.Fatalf("plain-0: %+v", d)
	}
	harness.Never(t, time.Until(deadline.Add(15*time.Second)), "the iSCSI pod force-deleted (15 s past its deadline)", func() bool {
		return !uidExists(t, cp, held)
	})
	d := decision(t, ops.WaitFor(t, 5*time.Second, "skip of the iSCSI pod", outcomeOf(held, "skipped")))
	if d.Reason != "NodeNotConfirmedDown" || !strings.Contains(d.Message, "storage") {
		t.Fatalf("iscsi-0: %+v, want skipped NodeNotConfirmedDown naming its storage", d)
	}
	if got := ops.Count(outcomeOf(held, "forcedeleted")); got != 0 {
		t.Fatalf("iscsi-0: %d forcedeleted outcomes", got)
	}
	if cleanup.Exited() {
		t.Fatalf("opswire-cleanup exited:\n%s", cleanup.Logs())
	}
	t.Logf("whole test %v", time.Since(started).Round(time.Millisecond))
}

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/test/harness"
)

// TestCleanupRateLimitFailover: the shared rate window (docs/actuate.md) on the
// cleanup actor. Two deletions per 12 s, five evicted pods; the leader deletes
// two and is SIGKILLed; the new leader reads both back from OPS and deletes
// more only when they leave the window.
func TestCleanupRateLimitFailover(t *testing.T) {
	const pods, perWindow, window = 5, 2, 12 * time.Second
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "rl")
	cfg := harness.WriteConfig(t, cleanupConfig(fmt.Sprintf("maxDeletionsPerMinute: %d", perWindow), fmt.Sprintf("rateWindow: %v", window)))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	kubeconfig := cleanupKubeconfig(t, cp)
	procs := map[string]*harness.Process{}
	for _, id := range []string{"a", "b"} {
		procs[id] = startCleanup(t, n, cfg, kubeconfig, id)
	}
	first, _ := waitLeader(t, cp, procs)
	for i := range pods {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("rl", fmt.Sprintf("ev-%d", i), worker.Name)))
	}
	deleted := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cleanup.deleted.rl.") }
	harness.Eventually(t, 20*time.Second, "the first leader's two deletions in OPS", func() bool { return ops.Count(deleted) == perWindow })
	firstStored := opsStoredTime(t, n, ops.WaitFor(t, time.Second, "first deletion", deleted).Seq)
	procs[first].Kill()
	second := "a"
	if first == "a" {
		second = "b"
	}
	harness.Eventually(t, 20*time.Second, "the new leader seeded its window", func() bool {
		return procs[second].Metric("opswire_rate_window_seeded_actions") == perWindow
	})
	remaining := func() int {
		left := 0
		for i := range pods {
			if podExists(t, cp, "rl", fmt.Sprintf("ev-%d", i)) {
				left++
			}
		}
		return left
	}
	harness.Never(t, time.Until(firstStored.Add(window-time.Second)), "a third deletion within the window", func() bool {
		return remaining() < pods-perWindow
	})
	harness.Eventually(t, 10*time.Second, "deletions go on once the window moved", func() bool { return remaining() < pods-perWindow })
	if left := remaining(); left < pods-2*perWindow {
		t.Fatalf("%d pods left: more than %d deletions per window", left, perWindow)
	}
	if v := procs[second].Metric(`opswire_audit_stored_total`); v < 1 || v > perWindow {
		t.Fatalf("the new leader published %v audit messages in its first window", v)
	}
}

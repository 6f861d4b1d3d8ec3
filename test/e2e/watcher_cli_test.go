package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/test/harness"
)

// TestWatcherWithSeedConfigFeedsCoreSubscribers runs the watcher with the
// seed's config.yml, unchanged, and checks what a user running
// `nats sub 'kube.>'` sees.
func TestWatcherWithSeedConfigFeedsCoreSubscribers(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	seen := map[string]bool{}
	var mu sync.Mutex
	sub, err := n.Conn.Subscribe("kube.>", func(m *nats.Msg) {
		mu.Lock()
		seen[m.Subject] = true
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	harness.CreateNode(t, cp.Client, harness.Node("seed-node", nil))
	harness.CreatePod(t, cp.Client, harness.Pod("default", "seed-pod", "seed-node"))
	root, _ := harness.RepoRoot()
	w := harness.StartService(t, "watcher", harness.ServiceOptions{
		Config: filepath.Join(root, "shared", "config", "testdata", "seed.yml"), Kubeconfig: cp.Kubeconfig, NATSURL: n.URL,
	})
	w.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 20*time.Second, "node and pod on core subjects", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["kube.default.node.seed-node"] && seen["kube.default.pod.default.seed-pod"]
	})
	if !strings.Contains(w.Logs(), `"lease":"kube-system/ops-resource-controller-watcher"`) {
		t.Fatalf("watcher did not take the seed's lease (controller.leaseLockName/leaseLockNamespace)")
	}
}

// TestWatcherRejectsBadConfig: invalid configuration exits 2 and names the key.
func TestWatcherRejectsBadConfig(t *testing.T) {
	bin := harness.Build(t, "watcher")
	bad := filepath.Join(t.TempDir(), "bad.yml")
	if err := os.WriteFile(bad, []byte("autoCordon:\n  maxPods: 10\n  minPodz: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--config", bad).CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok || exit.ExitCode() != 2 {
		t.Fatalf("exit = %v, want code 2; output %s", err, out)
	}
	if !strings.Contains(string(out), "autoCordon.minPodz") {
		t.Fatalf("output does not name the bad key: %s", out)
	}
}

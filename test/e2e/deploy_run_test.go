package e2e

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/testport"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployRunLocal runs `make run`'s program against a real API server
// given through KUBECONFIG (as a user's current kubeconfig would be): it must
// start a local NATS and the five services, run the actors in dry-run by
// default (a decision is published, the node is not touched), and stop
// everything with exit 0 on Ctrl-C.
func TestDeployRunLocal(t *testing.T) {
	cp := harness.StartControlPlane(t)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var binDir string
	for _, svc := range harness.Services {
		binDir = filepath.Dir(harness.Build(t, svc))
	}
	run := filepath.Join(t.TempDir(), "opswire-run")
	build := exec.Command("go", "build", "-o", run, "./cmd/opswire-run")
	build.Dir = filepath.Join(root, "test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build opswire-run: %v\n%s", err, out)
	}
	// deploy/local/config.yml with a threshold a test reaches.
	local := mustRead(t, filepath.Join(root, "deploy", "local", "config.yml"))
	cfg := harness.WriteConfig(t, strings.Replace(local, "autoCordon:\n", "autoCordon:\n  maxPods: 3\n  minPods: 1\n  interval: 2s\n  maxCordonedPercent: 100\n", 1))

	natsPort := testport.Must(t)
	firstPort, err := testport.FreeRun(len(harness.Services)) // consecutive, one per service
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	cmd := exec.Command(run, "--bin", binDir, "--config", cfg, "--data", t.TempDir(),
		"--nats-port", strconv.Itoa(natsPort), "--first-port", strconv.Itoa(firstPort))
	cmd.Dir = root
	cmd.Env = append(filteredTestEnv(), "KUBECONFIG="+cp.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	for i := range harness.Services {
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", firstPort+i)
		harness.Eventually(t, 60*time.Second, harness.Services[i]+" ready", func() bool {
			select {
			case err := <-exited:
				t.Fatalf("opswire-run exited early (%v):\n%s", err, out.String())
			default:
			}
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sub, err := nc.SubscribeSync("ops.local.cordon.>")
	if err != nil {
		t.Fatal(err)
	}
	harness.CreateNode(t, cp.Client, harness.Node("run-node", nil))
	for i := 0; i < 3; i++ {
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("run-%d", i), "run-node"))
	}
	msg, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no cordon decision: %v\n%s", err, out.String())
	}
	if msg.Subject != "ops.local.cordon.dryrun.run-node" {
		t.Fatalf("got %s, want the dry-run decision ops.local.cordon.dryrun.run-node", msg.Subject)
	}
	if n := harness.GetNode(t, cp.Client, "run-node"); n.Spec.Unschedulable {
		t.Fatal("make run is dry-run by default, but the node was cordoned")
	}
	if !strings.Contains(out.String(), "watcher  | ") || !strings.Contains(out.String(), "cordon   | ") {
		t.Errorf("service logs are not prefixed with their names:\n%s", out.String())
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("opswire-run did not exit 0 on Ctrl-C: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("opswire-run did not exit within 30s of Ctrl-C")
	}
	if left := processesMentioning(t, cfg); len(left) > 0 {
		t.Errorf("services left behind:\n%s", strings.Join(left, "\n"))
	}
}

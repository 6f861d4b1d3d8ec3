package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opswire/opswire/test/harness"
)

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDeployDemo runs `make demo`'s program as a user would (without pauses),
// waits until it has shown every situation, presses Ctrl-C (SIGINT) and
// checks that it exits 0 and leaves no process and no temporary directory
// behind.
func TestDeployDemo(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "opswire-demo")
	build := exec.Command("go", "build", "-o", bin, "./cmd/opswire-demo")
	build.Dir = filepath.Join(root, "test")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build opswire-demo: %v\n%s", err, out)
	}
	// Every temporary file and process argument of the demo lives under tmp.
	tmp := t.TempDir()
	var stdout, stderr lockedBuffer
	cmd := exec.Command(bin, "--pace", "0")
	cmd.Dir = root
	cmd.Env = append(filteredTestEnv(), "TMPDIR="+tmp)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	harness.Eventually(t, 3*time.Minute, "the demo to show every situation", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the demo exited early (%v):\n%s\n%s", err, stdout.String(), stderr.String())
		default:
		}
		return strings.Contains(stdout.String(), "Press Ctrl-C")
	})
	shown := time.Since(start)
	out := stdout.String()
	for _, want := range []string{
		"OPS cordon.cordoned              node node-a",
		"OPS cordon.uncordoned            node node-a",
		"OPS cleanup.deleted              pod shop/evicted-1",
		"OPS cleanup.forcedeleted         pod shop/stuck-1",
		"OPS report.restarts              2 pods over 5 restarts",
		"OPS report.images                node node-d",
		"] Node cordon", "] Pod cleanup", "] Pods restarting too often", "] Node image storage",
		"shop · api-1 · node-b · 12 · OOMKilled",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the demo did not show %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("demo output:\n%s\nstderr:\n%s", out, stderr.String())
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the demo did not exit 0 on Ctrl-C: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not exit within 60s of Ctrl-C")
	}
	t.Logf("every situation shown after %v (including control-plane start); clean exit after Ctrl-C", shown.Round(100*time.Millisecond))

	if left := processesMentioning(t, tmp); len(left) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "opswire-") {
			t.Errorf("temporary directory left behind: %s", e.Name())
		}
	}
}

// processesMentioning lists running processes whose command line mentions s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		if cmdline := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmdline, s) {
			out = append(out, filepath.Base(filepath.Dir(f))+": "+cmdline)
		}
	}
	return out
}

// filteredTestEnv is the environment without variables that would point the
// demo's services elsewhere.
func filteredTestEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "OPSWIRE_") || strings.HasPrefix(kv, "TMPDIR=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

package harness

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/testport"
)

var builds sync.Map // service name -> *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// Build compiles services/<name> into .cache/test-bin once per test process
// and returns the binary's path.
func Build(t testing.TB, service string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(service, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			b.err = err
			return
		}
		out := filepath.Join(root, ".cache", "test-bin", "opswire-"+service)
		cmd := exec.Command("go", "build", "-o", out, "./services/"+service)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./services/%s: %v\n%s", service, err, msg)
			return
		}
		b.path = out
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// ServiceOptions are the command line of one service process.
type ServiceOptions struct {
	Config     string // config file path
	Kubeconfig string // omitted when empty (the notifier takes none)
	NATSURL    string
	ID         string   // --id (leader identity); defaults to the service name
	Args       []string // extra flags, e.g. --dry-run, --nats-user
	Env        []string // extra environment, KEY=VALUE
}

// Process is a running service binary.
type Process struct {
	Name      string
	HealthURL string // http://127.0.0.1:<port>
	LogPath   string
	p         *proc
}

// StartService builds (once) and starts opswire-<service> as a subprocess
// with --listen on a free port and debug JSON logs. It is stopped on cleanup.
func StartService(t testing.TB, service string, o ServiceOptions) *Process {
	t.Helper()
	bin := Build(t, service)
	port := testport.Must(t)
	id := o.ID
	if id == "" {
		id = service
	}
	args := []string{"--config", o.Config, "--nats-url", o.NATSURL, "--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--id", id, "--log-level", "debug", "--log-format", "json"}
	if o.Kubeconfig != "" {
		args = append(args, "--kubeconfig", o.Kubeconfig)
	}
	args = append(args, o.Args...)
	logPath := logPath(t, service+"-"+id+".log")
	env := append(filteredEnv(), o.Env...)
	pr := &Process{Name: service + "/" + id, HealthURL: "http://127.0.0.1:" + strconv.Itoa(port), LogPath: logPath}
	pr.p = startLoggedEnv(t, logPath, env, bin, args...)
	t.Cleanup(func() { pr.p.terminate(15 * time.Second) })
	return pr
}

// filteredEnv is the test's environment without variables that would change
// what a service connects to.
func filteredEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "OPSWIRE_") || strings.HasPrefix(kv, "POD_NAME=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// WaitReady polls /readyz until it answers 200.
func (p *Process) WaitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, p.Name+" /readyz", func() bool {
		if p.p.exited() {
			t.Fatalf("%s exited (code %d):\n%s", p.Name, p.p.cmd.ProcessState.ExitCode(), tail(p.LogPath, 40))
		}
		return p.Ready()
	})
}

// Ready reports whether /readyz answers 200 within a second.
func (p *Process) Ready() bool {
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get(p.HealthURL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop sends SIGTERM and returns the exit code (-1 if it did not exit in 15 s).
func (p *Process) Stop() int { return p.p.signal(syscall.SIGTERM, 15*time.Second) }

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() { p.p.signal(syscall.SIGKILL, 10*time.Second) }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool { return p.p.exited() }

// Logs returns everything the process has logged so far.
func (p *Process) Logs() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Metric scrapes /metrics and returns the value of the sample named exactly
// series, labels included (e.g. `opswire_watcher_published_total{kind="pod"}`),
// or -1 when the process exports no such sample or cannot be scraped: tests
// poll it across restarts, so an unreachable process reads as "not yet".
func (p *Process) Metric(series string) float64 {
	resp, err := http.Get(p.HealthURL + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// WriteConfig writes a configuration file for a test and returns its path.
func WriteConfig(t testing.TB, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Pid is the process id (for RSS readings in benchmarks).
func (p *Process) Pid() int { return p.p.cmd.Process.Pid }

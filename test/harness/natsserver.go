package harness

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NATSServer is one real nats-server process (the cached binary of
// NATSServerVersion) started from a configuration file the test wrote, e.g.
// a deploy/ overlay's nats.conf with local paths and ports. Stop, Kill and
// Start simulate an outage on the same ports and storage.
type NATSServer struct {
	Name string
	bin  string
	conf string
	env  []string
	log  string

	starts int
	p      *proc
}

// StartNATSServer starts nats-server -c conf with env (KEY=VALUE, the
// variables the configuration reads) and waits until it reports ready. It
// is stopped on cleanup.
func StartNATSServer(t testing.TB, name, conf string, env []string) *NATSServer {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	n := &NATSServer{Name: name, bin: filepath.Join(dir, "nats-server-"+NATSServerVersion()), conf: conf, env: env,
		log: logPath(t, "nats-"+name+".log")}
	if _, err := os.Stat(n.bin); err != nil {
		t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", n.bin)
	}
	t.Cleanup(func() { n.p.terminate(10 * time.Second) })
	n.Start(t)
	return n
}

// Start starts the server (again) and waits until it logs "Server is ready".
func (n *NATSServer) Start(t testing.TB) {
	t.Helper()
	log := n.log
	if n.starts > 0 {
		log = strings.TrimSuffix(n.log, ".log") + "-" + strconv.Itoa(n.starts) + ".log"
	}
	n.starts++
	n.p = startLoggedEnv(t, log, n.env, n.bin, "-c", n.conf)
	Eventually(t, 60*time.Second, "nats-server "+n.Name+" ready", func() bool {
		if n.p.exited() {
			t.Fatalf("nats-server %s exited:\n%s", n.Name, tail(log, 30))
		}
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "Server is ready")
	})
}

// Stop stops the server cleanly (SIGTERM; SIGKILL after 10 s).
func (n *NATSServer) Stop(t testing.TB) {
	t.Helper()
	n.p.terminate(10 * time.Second)
}

// Kill SIGKILLs the server and waits for it to exit.
func (n *NATSServer) Kill(t testing.TB) {
	t.Helper()
	n.p.signal(syscall.SIGKILL, 10*time.Second)
	if !n.p.exited() {
		t.Fatalf("nats-server %s did not die", n.Name)
	}
}

// Logs is everything the server logged since its last start.
func (n *NATSServer) Logs() string {
	b, _ := os.ReadFile(n.p.log)
	return string(b)
}

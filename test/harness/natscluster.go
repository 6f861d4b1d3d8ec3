package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/testport"
)

// NATSCluster is a JetStream cluster of real nats-server processes (the
// binary hack/build-controlplane.sh caches, at the version of test/go.mod),
// on loopback, each with its own storage. Nodes can be SIGKILLed and started
// again on the same ports and storage.
type NATSCluster struct {
	URL  string   // every node's client URL, comma-separated (what services get)
	URLs []string // one per node
	Conn *nats.Conn
	JS   jetstream.JetStream

	// Nodes are the nodes' names and ports (StartNATSClusterFrom's render input).
	Nodes []NATSNode

	bin     string
	connect []nats.Option
	nodes   []*natsNode
}

type natsNode struct {
	name, conf, log string
	starts          int
	p               *proc
}

// NATSServerVersion is the nats-server version test/go.mod requires, which
// names the cached binary (hack/build-controlplane.sh reads the same line).
func NATSServerVersion() string {
	root, err := RepoRoot()
	if err != nil {
		return "unknown"
	}
	b, err := os.ReadFile(filepath.Join(root, "test", "go.mod"))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/nats-io/nats-server/v2" {
			return f[1]
		}
	}
	return "unknown"
}

// StartNATSCluster starts size nodes, waits until JetStream has a meta
// leader, and connects a test client to all of them. Everything stops on cleanup.
func StartNATSCluster(t testing.TB, size int) *NATSCluster {
	t.Helper()
	return StartNATSClusterFrom(t, size, func(n NATSNode) string {
		return fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
jetstream {
  store_dir: %q
  max_memory_store: 64MB
  max_file_store: 2GB
}
cluster {
  name: opswire-e2e
  listen: 127.0.0.1:%d
  routes: [%s]
}
`, n.Name, n.ClientPort, n.StoreDir, n.RoutePort, strings.Join(n.Routes, ", "))
	})
}

// NATSNode is what one node's configuration is made of: its name (n1, n2,
// …), loopback ports, storage, and every node's route URL
// (nats-route://127.0.0.1:<route port>). HTTPPort is free for monitoring.
type NATSNode struct {
	Name                            string
	ClientPort, RoutePort, HTTPPort int
	StoreDir                        string
	Routes                          []string
}

// StartNATSClusterFrom is StartNATSCluster with each node's configuration
// file made by render (a production configuration with TLS and users, say);
// the processes inherit the test's environment (t.Setenv), and connect are
// the options of every connection the harness makes (TLS CA, user). Node i's
// ports are in Nodes[i].
func StartNATSClusterFrom(t testing.TB, size int, render func(NATSNode) string, connect ...nats.Option) *NATSCluster {
	t.Helper()
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	c := &NATSCluster{bin: filepath.Join(dir, "nats-server-"+NATSServerVersion()), connect: connect}
	if _, err := os.Stat(c.bin); err != nil {
		t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", c.bin)
	}
	base := t.TempDir()
	for i := range size {
		name := "n" + strconv.Itoa(i+1)
		c.Nodes = append(c.Nodes, NATSNode{Name: name, ClientPort: testport.Must(t), RoutePort: testport.Must(t),
			HTTPPort: testport.Must(t), StoreDir: filepath.Join(base, name)})
	}
	var routes []string
	for _, n := range c.Nodes {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(n.RoutePort))
	}
	for i := range c.Nodes {
		c.Nodes[i].Routes = routes
		n := c.Nodes[i]
		conf := filepath.Join(base, n.Name+".conf")
		if err := os.WriteFile(conf, []byte(render(n)), 0o600); err != nil {
			t.Fatal(err)
		}
		url := "nats://127.0.0.1:" + strconv.Itoa(n.ClientPort)
		c.URLs = append(c.URLs, url)
		c.nodes = append(c.nodes, &natsNode{name: n.Name, conf: conf, log: logPath(t, "nats-"+n.Name+".log")})
	}
	c.URL = strings.Join(c.URLs, ",")
	t.Cleanup(func() {
		if c.Conn != nil {
			c.Conn.Close()
		}
		for _, n := range c.nodes {
			n.p.terminate(10 * time.Second)
		}
	})
	for i := range c.nodes {
		c.start(t, i)
	}
	nc, err := nats.Connect(c.URL, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, connect...)...)
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c.Conn, c.JS = nc, js
	Eventually(t, 60*time.Second, "a JetStream meta leader", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	return c
}

func (c *NATSCluster) start(t testing.TB, i int) {
	t.Helper()
	n := c.nodes[i]
	log := n.log
	if n.starts > 0 {
		log = strings.TrimSuffix(n.log, ".log") + "-" + strconv.Itoa(n.starts) + ".log"
	}
	n.starts++
	n.p = startLogged(t, log, c.bin, "-c", n.conf)
	Eventually(t, 30*time.Second, n.name+" listening", func() bool {
		nc, err := nats.Connect(c.URLs[i], append([]nats.Option{nats.NoReconnect()}, c.connect...)...)
		if err != nil {
			if n.p.exited() {
				t.Fatalf("nats-server %s exited:\n%s", n.name, tail(log, 30))
			}
			return false
		}
		nc.Close()
		return true
	})
}

// Names are the nodes' server names (n1, n2, …), in order.
func (c *NATSCluster) Names() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.name)
	}
	return out
}

// Index is the position of the node with this server name, or -1.
func (c *NATSCluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// Kill SIGKILLs node i and waits for it to exit.
func (c *NATSCluster) Kill(t testing.TB, i int) {
	t.Helper()
	c.nodes[i].p.signal(syscall.SIGKILL, 10*time.Second)
	if !c.nodes[i].p.exited() {
		t.Fatalf("nats-server %s did not die", c.nodes[i].name)
	}
}

// Stop stops node i cleanly (SIGTERM; SIGKILL after 10 s).
func (c *NATSCluster) Stop(t testing.TB, i int) {
	t.Helper()
	c.nodes[i].p.terminate(10 * time.Second)
}

// Start starts node i again with its configuration and storage.
func (c *NATSCluster) Start(t testing.TB, i int) { t.Helper(); c.start(t, i) }

// StreamInfo reads a stream's info (cluster leader and replicas included).
func (c *NATSCluster) StreamInfo(name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.JS.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

// Log is the output of node i's current run.
func (c *NATSCluster) Log(i int) string {
	b, _ := os.ReadFile(c.nodes[i].p.log)
	return string(b)
}

// NATSOutsider is a nats-server process that is not a member of the
// cluster: one that tries to join it (with a wrong certificate, say).
type NATSOutsider struct {
	p *proc
}

// StartOutsider starts nats-server with the configuration body (it inherits
// the test's environment); it stops on cleanup.
func (c *NATSCluster) StartOutsider(t testing.TB, name, body string) *NATSOutsider {
	t.Helper()
	conf := filepath.Join(t.TempDir(), name+".conf")
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o := &NATSOutsider{p: startLogged(t, logPath(t, "nats-"+name+".log"), c.bin, "-c", conf)}
	t.Cleanup(func() { o.p.terminate(10 * time.Second) })
	return o
}

// Log is the outsider's output so far.
func (o *NATSOutsider) Log() string {
	b, _ := os.ReadFile(o.p.log)
	return string(b)
}

// Exited reports whether the process has exited.
func (o *NATSOutsider) Exited() bool { return o.p.exited() }

// Stop stops the outsider (SIGTERM; SIGKILL after 10 s).
func (o *NATSOutsider) Stop() { o.p.terminate(10 * time.Second) }

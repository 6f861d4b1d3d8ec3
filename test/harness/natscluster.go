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

	bin   string
	nodes []*natsNode
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
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	c := &NATSCluster{bin: filepath.Join(dir, "nats-server-"+NATSServerVersion())}
	if _, err := os.Stat(c.bin); err != nil {
		t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", c.bin)
	}
	clientPorts, routePorts := make([]int, size), make([]int, size)
	for i := range size {
		clientPorts[i], routePorts[i] = mustFreePort(t), mustFreePort(t)
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
	}
	base := t.TempDir()
	for i := range size {
		name := "n" + strconv.Itoa(i+1)
		conf := filepath.Join(base, name+".conf")
		body := fmt.Sprintf(`server_name: %s
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
`, name, clientPorts[i], filepath.Join(base, name), routePorts[i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		url := "nats://127.0.0.1:" + strconv.Itoa(clientPorts[i])
		c.URLs = append(c.URLs, url)
		c.nodes = append(c.nodes, &natsNode{name: name, conf: conf, log: logPath(t, "nats-"+name+".log")})
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
	nc, err := nats.Connect(c.URL, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
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
		nc, err := nats.Connect(c.URLs[i], nats.NoReconnect())
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

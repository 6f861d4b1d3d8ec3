package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opswire/opswire/test/harness"
)

// fleetClusters are the clusters of the fleet overlays' example: the hub's
// auth.conf has a leaf user for each, its config.yml sources each.
var fleetClusters = []string{"a", "b"}

// fleetPasswords are the test's passwords: the base users', the route's and
// one leaf password per cluster (Secret opswire-fleet).
func fleetPasswords() map[string]string {
	pw := harness.DeployPasswords()
	for _, c := range fleetClusters {
		pw["leaf_"+c] = "pleaf-" + c + "-91d0c37e"
	}
	return pw
}

// natsConfFiles writes the rendered ConfigMap nats-config of objs to a new
// directory, rewritten for one local process: loopback ports for clients,
// monitoring and leaf nodes, temporary storage, the certificates of certs
// where the StatefulSet mounts nats-tls and nats-hub-ca, no lame-duck mode,
// and no cluster block (one server, as in TestDeployTLS). It returns
// the path of nats.conf.
func natsConfFiles(t *testing.T, objs []*unstructured.Unstructured, certs string, ports map[string]int) string {
	t.Helper()
	cm := harness.FindByPrefix(objs, "ConfigMap", "nats-config-")
	if cm == nil {
		t.Fatal("ConfigMap nats-config missing")
	}
	files, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	dir := t.TempDir()
	for name, body := range files {
		if name == "nats.conf" {
			body = localNATSConf(t, body, dir, certs, ports)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "nats.conf")
}

func localNATSConf(t *testing.T, body, dir, certs string, ports map[string]int) string {
	t.Helper()
	must := func(old, repl string) {
		t.Helper()
		if !strings.Contains(body, old) {
			t.Fatalf("nats.conf has no %q:\n%s", old, body)
		}
		body = strings.ReplaceAll(body, old, repl)
	}
	must("listen: 0.0.0.0:4222", "listen: 127.0.0.1:"+strconv.Itoa(ports["client"]))
	must("http: 127.0.0.1:8222", "http: 127.0.0.1:"+strconv.Itoa(ports["http"]))
	must("store_dir: /data", "store_dir: "+strconv.Quote(filepath.Join(dir, "data")))
	must("pid_file: /var/run/nats/nats.pid", "pid_file: "+strconv.Quote(filepath.Join(dir, "nats.pid")))
	// No lame-duck mode (30 s at least): the test's servers stop at once.
	must("lame_duck_duration: 30s", "")
	must("lame_duck_grace_period: 5s", "")
	must("/etc/nats/tls/", certs+"/")
	if p, ok := ports["leafnodes"]; ok {
		must("listen: 0.0.0.0:7422", "listen: 127.0.0.1:"+strconv.Itoa(p))
	}
	body = strings.ReplaceAll(body, "/etc/nats/hub-ca/", certs+"/")
	// Drop the cluster block: one process per server.
	start := regexp.MustCompile(`(?m)^cluster \{`).FindStringIndex(body)
	if start == nil {
		t.Fatal("nats.conf has no cluster block")
	}
	depth, end := 0, -1
	for i := start[0]; i < len(body) && end < 0; i++ {
		switch body[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				end = i + 1
			}
		}
	}
	return body[:start[0]] + body[end:]
}

// stsEnv is the environment a nats-server container of the StatefulSet gets:
// its literal values with $(VAR) expanded as the kubelet does, values that
// come from a Secret or ConfigMap taken from vals (by variable name).
func stsEnv(t *testing.T, objs []*unstructured.Unstructured, vals map[string]string) []string {
	t.Helper()
	sts := harness.FindObj(objs, "StatefulSet", "nats")
	if sts == nil {
		t.Fatal("StatefulSet nats missing")
	}
	containers, _, _ := unstructured.NestedSlice(sts.Object, "spec", "template", "spec", "containers")
	env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	resolved := map[string]string{}
	ref := regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)
	out := os.Environ()
	for _, e := range env {
		m := e.(map[string]any)
		name := m["name"].(string)
		v, literal := m["value"].(string)
		if literal {
			v = ref.ReplaceAllStringFunc(v, func(s string) string { return resolved[s[2:len(s)-1]] })
		} else if vals[name] != "" {
			v = vals[name]
		} else {
			continue // POD_NAME and the route passwords: from vals or not needed
		}
		resolved[name] = v
		out = append(out, name+"="+v)
	}
	for k, v := range vals {
		if _, ok := resolved[k]; !ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// natsEnvPasswords are the StatefulSet's password variables for pw.
func natsEnvPasswords(pw map[string]string) map[string]string {
	vals := map[string]string{"POD_NAME": "nats-0"}
	for u, p := range pw {
		vals["NATS_"+strings.ToUpper(u)+"_PASSWORD"] = p
	}
	return vals
}

// tcpProxy forwards TCP connections to a target and can cut them all and
// refuse new ones: a network partition of one link.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.Cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				c.Close()
				continue
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns = append(p.conns, c, d)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(d, c); d.Close() }()
			go func() { _, _ = io.Copy(c, d); c.Close() }()
		}
	}()
	return p
}

// Addr is host:port of the proxy.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every forwarded connection and refuses new ones until Restore.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore accepts connections again.
func (p *tcpProxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// streamSubjects counts a stream's stored messages per subject under filter.
func streamSubjects(t *testing.T, js jetstream.JetStream, stream, filter string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for s, n := range info.State.Subjects {
		out[s] = int(n)
	}
	return out
}

// connectUser connects to a TLS server as a deploy/ user with its inbox prefix.
func connectUser(t *testing.T, url, caFile, user, password string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.RootCAs(caFile), nats.CustomInboxPrefix("_INBOX_"+user),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect %s as %s: %v", url, user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func jetStream(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// cardsNaming counts, for each name, the cards (their texts) that name it.
func cardsNaming(cards []string, names []string) map[string]int {
	out := map[string]int{}
	for _, n := range names {
		out[n] = 0
		for _, text := range cards {
			if strings.Contains(text, n) {
				out[n]++
			}
		}
	}
	return out
}

func fmtCounts(m map[string]int) string {
	var b strings.Builder
	for k, v := range m {
		fmt.Fprintf(&b, "%s=%d ", k, v)
	}
	return b.String()
}

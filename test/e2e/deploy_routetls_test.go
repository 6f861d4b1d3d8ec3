package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opswire/opswire/shared/testport"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployRouteTLS runs the production overlay's NATS configuration as it
// is rendered (nats.conf with TLS for clients and mutual TLS on the cluster
// routes, auth.conf, the StatefulSet's route URLs with the route password)
// on a real 3-node cluster of nats-server processes, with certificates from
// deploy/make-certs.sh. Every server routes to the two others; the route port
// announces TLS as required; a fourth server that trusts the CA and knows the
// route password but presents a certificate from another CA is refused, and
// so is one that speaks plain text; neither ever appears in /routez. Then the
// watcher and cleanup (production Deployments' settings, the CA to verify the
// servers, all three URLs) run on KUBE and OPS with 3 replicas across the TLS
// routes: the node leading OPS is SIGKILLed in the middle of a burst of
// evictions, every pod is deleted by exactly one DELETE, every decision is
// stored, and the restarted node catches up.
func TestDeployRouteTLS(t *testing.T) {
	const total = 30
	certs := makeCerts(t, "IP:127.0.0.1,DNS:localhost")
	otherCA := makeCerts(t, "IP:127.0.0.1,DNS:localhost")
	prod := harness.KustomizeBuild(t, deployPath(t, "overlays", "production"))
	pw := harness.DeployPasswords()
	for u, p := range pw {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", p)
	}
	cm := harness.FindByPrefix(prod, "ConfigMap", "nats-config-")
	if cm == nil {
		t.Fatal("ConfigMap nats-config missing")
	}
	files, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	routeEnv := statefulSetRoutes(t, prod)
	caFile := filepath.Join(certs, "ca.crt")

	// The three members' configuration: the production nats.conf with the
	// harness's loopback ports and storage, the certificates' directory, and
	// the route URLs of the StatefulSet pointed at the members' route ports.
	var members []harness.NATSNode
	start := time.Now()
	cl := harness.StartNATSClusterFrom(t, 3, func(n harness.NATSNode) string {
		members = append(members, n)
		if len(members) == 3 {
			for i, m := range members {
				u := routeEnv[i]
				u.Host = "127.0.0.1:" + strconv.Itoa(m.RoutePort)
				t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), u.String())
			}
		}
		return productionNode(t, files, n, certs, true)
	}, nats.RootCAs(caFile), nats.UserInfo("audit", pw["audit"]), nats.CustomInboxPrefix("_INBOX_audit"))
	harness.Eventually(t, 30*time.Second, "every member routed to the two others", func() bool {
		for i := range members {
			if got := routePeers(t, members[i]); len(got) != 2 {
				return false
			}
		}
		return true
	})
	t.Logf("3 nodes started and fully routed over mutual TLS in %v", time.Since(start).Round(time.Millisecond))
	for i, m := range members {
		v := monitorJSON[struct {
			Cluster struct {
				TLSRequired bool `json:"tls_required"`
				TLSVerify   bool `json:"tls_verify"`
			} `json:"cluster"`
		}](t, m, "/varz")
		if !v.Cluster.TLSRequired || !v.Cluster.TLSVerify {
			t.Fatalf("%s: cluster tls_required %v, tls_verify %v: want mutual TLS on the routes", m.Name, v.Cluster.TLSRequired, v.Cluster.TLSVerify)
		}
		t.Logf("%s: routes to %v (TLS required and verified)", m.Name, routePeers(t, members[i]))
	}
	// The route port itself speaks TLS first and wants a client certificate.
	routePortRefuses(t, "127.0.0.1:"+strconv.Itoa(members[0].RoutePort), caFile)

	// Outsiders that know the route password: one presents a certificate of
	// another CA (while trusting the real one, so only the members' check
	// can refuse it), one has no TLS on its routes.
	outsiders := map[string]*harness.NATSOutsider{}
	for _, o := range []struct {
		name  string
		certs string
		tls   bool
	}{{"n4-wrong-ca", otherCA, true}, {"n5-plain", certs, false}} {
		node := harness.NATSNode{Name: o.name, ClientPort: testport.Must(t), RoutePort: testport.Must(t), HTTPPort: testport.Must(t),
			StoreDir: filepath.Join(t.TempDir(), o.name)}
		body := productionNode(t, files, node, o.certs, o.tls)
		if o.tls { // trusts the real CA: the refusal is the members' verify
			body = strings.ReplaceAll(body, filepath.Join(o.certs, "ca.crt"), caFile)
		}
		outsiders[o.name] = cl.StartOutsider(t, o.name, body)
		members = append(members, node)
	}
	harness.Eventually(t, 30*time.Second, "the members log the wrong-CA route's refused handshake", func() bool {
		for i := range 3 {
			if l := cl.Log(i); strings.Contains(l, "TLS route handshake error") && strings.Contains(l, "certificate signed by unknown authority") {
				return true
			}
		}
		return false
	})
	// The plain one's routes are accepted at TCP and closed at once by the
	// members it dials (n2 and n3, which the plain probe above never reached).
	harness.Eventually(t, 30*time.Second, "the plain-text outsider's routes closed by the members", func() bool {
		return strings.Contains(outsiders["n5-plain"].Log(), "Router connection closed") &&
			(strings.Contains(cl.Log(1), "does not look like a TLS handshake") || strings.Contains(cl.Log(2), "does not look like a TLS handshake"))
	})
	t.Logf("wrong CA refused: %s", firstLine(grepLines(cl.Log(0)+cl.Log(1)+cl.Log(2), "certificate signed by unknown authority")))
	t.Logf("plain text refused: %s", firstLine(grepLines(cl.Log(1)+cl.Log(2), "does not look like a TLS handshake")))
	for _, m := range members {
		peers := routePeers(t, m)
		for _, p := range peers {
			if strings.HasPrefix(p, "n4") || strings.HasPrefix(p, "n5") {
				t.Errorf("%s has a route to the outsider %s", m.Name, p)
			}
		}
		if strings.HasPrefix(m.Name, "n4") || strings.HasPrefix(m.Name, "n5") {
			if len(peers) != 0 {
				t.Errorf("the outsider %s is routed to %v", m.Name, peers)
			}
		}
	}
	members = members[:3]
	for name, o := range outsiders {
		if o.Exited() {
			t.Fatalf("%s exited (it should have kept trying):\n%s", name, o.Log())
		}
		o.Stop() // its retries would only load the members from here on
	}

	// opswire on the TLS cluster: KUBE and OPS with 3 replicas.
	cp := harness.StartControlPlane(t)
	harness.ServerSideApply(t, cp.Config, prod) // namespace, service accounts, RBAC
	cfgPath := harness.WriteConfig(t, testConfigFrom(t, files0(t, prod)))
	harness.CreateNamespace(t, cp.Client, "bulk")
	for i := range 3 {
		harness.CreateNode(t, cp.Client, harness.Node(fmt.Sprintf("tls-worker-%d", i), nil))
	}
	for i := range total {
		harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("ev-%03d", i), fmt.Sprintf("tls-worker-%d", i%3)))
	}
	px := harness.StartAPIProxy(t, cp)
	procs := map[string]*harness.Process{}
	for _, svc := range []string{"watcher", "cleanup"} {
		env := append(harness.DeploymentEnv(t, prod, "opswire-"+svc), "OPSWIRE_NATS_TLS_CA="+caFile, "OPSWIRE_NATS_PASSWORD="+pw[svc])
		kc := cp.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc)
		if svc == "cleanup" {
			kc = px.Kubeconfig(t, kc)
		}
		procs[svc] = harness.StartService(t, svc, harness.ServiceOptions{Config: cfgPath, Kubeconfig: kc, NATSURL: cl.URL, Env: env})
		procs[svc].WaitReady(t, 60*time.Second)
	}
	for _, s := range []string{"KUBE", "OPS"} {
		info, err := cl.StreamInfo(s)
		if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: want 3 replicas across the cluster: %v %+v", s, err, info)
		}
	}
	// Both services are connected over TLS (every member's /connz).
	tlsConns := map[string]string{}
	for _, m := range members {
		cz := monitorJSON[struct {
			Conns []struct {
				Name       string `json:"name"`
				User       string `json:"authorized_user"`
				TLSVersion string `json:"tls_version"`
			} `json:"connections"`
		}](t, m, "/connz?auth=1")
		for _, c := range cz.Conns {
			if c.TLSVersion == "" {
				t.Errorf("%s on %s (%s) connected without TLS", c.Name, m.Name, c.User)
			}
			if strings.HasPrefix(c.Name, "opswire-") {
				tlsConns[c.User] = m.Name + " TLS " + c.TLSVersion
			}
		}
	}
	if tlsConns["watcher"] == "" || tlsConns["cleanup"] == "" {
		t.Fatalf("service connections %v: want the watcher and cleanup", tlsConns)
	}
	t.Logf("service connections: %v", tlsConns)

	deletes := func() int {
		return px.Count(func(r harness.APIRequest) bool {
			return r.Method == http.MethodDelete && strings.HasPrefix(r.Path, "/api/v1/namespaces/bulk/pods/")
		})
	}
	killed := -1
	var killedAt time.Time
	for i := range total {
		evict(t, cp, mustGetPod(t, cp, "bulk", fmt.Sprintf("ev-%03d", i)))
		if i == total/2 {
			harness.Eventually(t, 30*time.Second, "deletions under way", func() bool { return deletes() >= 5 })
			info, err := cl.StreamInfo("OPS")
			if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
				t.Fatalf("OPS leader: %v", err)
			}
			killed = cl.Index(info.Cluster.Leader)
			cl.Kill(t, killed)
			killedAt = time.Now()
			t.Logf("SIGKILLed %s, the OPS leader, after %d DELETEs", info.Cluster.Leader, deletes())
		}
	}
	harness.Eventually(t, 30*time.Second, "a new OPS leader", func() bool {
		info, err := cl.StreamInfo("OPS")
		return err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != members[killed].Name
	})
	t.Logf("OPS leader re-elected over the TLS routes %v after the kill", time.Since(killedAt).Round(time.Millisecond))
	harness.Eventually(t, 90*time.Second, "every evicted pod deleted", func() bool {
		for i := range total {
			if harness.PodExists(t, cp.Client, "bulk", fmt.Sprintf("ev-%03d", i)) {
				return false
			}
		}
		return true
	})
	burst := time.Since(killedAt)
	for i := range total {
		if d := deletesOf(px, "bulk", fmt.Sprintf("ev-%03d", i)); d != 1 {
			t.Errorf("ev-%03d: %d DELETE requests, want 1", i, d)
		}
	}
	var stored map[string]int
	harness.Eventually(t, 30*time.Second, "every deletion in OPS", func() bool {
		stored = opsSubjects(t, cl.JS, "ops.default.cleanup.deleted.bulk.>")
		return len(stored) >= total
	})
	for subj, n := range stored {
		if n != 1 {
			t.Errorf("%s stored %d times", subj, n)
		}
	}
	t.Logf("%d of %d deletions stored in OPS (R3 over TLS routes), all pods deleted %v after the kill", len(stored), total,
		burst.Round(time.Millisecond))

	// The killed node comes back over its TLS routes and catches up.
	restarted := time.Now()
	cl.Start(t, killed)
	opsLast := func(m harness.NATSNode) uint64 {
		jz := monitorJSON[struct {
			Accounts []struct {
				Streams []struct {
					Name  string `json:"name"`
					State struct {
						LastSeq uint64 `json:"last_seq"`
					} `json:"state"`
				} `json:"stream_detail"`
			} `json:"account_details"`
		}](t, m, "/jsz?accounts=true&streams=true")
		for _, a := range jz.Accounts {
			for _, s := range a.Streams {
				if s.Name == "OPS" {
					return s.State.LastSeq
				}
			}
		}
		return 0
	}
	var want uint64
	harness.Eventually(t, 60*time.Second, "the restarted node routed again and holding OPS up to the leader's last message", func() bool {
		info, err := cl.StreamInfo("OPS")
		if err != nil || len(routePeers(t, members[killed])) != 2 {
			return false
		}
		want = info.State.LastSeq
		return want > 0 && opsLast(members[killed]) == want
	})
	t.Logf("%s routed again and caught up to OPS seq %d %v after its restart", members[killed].Name, want,
		time.Since(restarted).Round(time.Millisecond))
	for svc, p := range procs {
		if p.Exited() {
			t.Fatalf("%s exited", svc)
		}
		// The one refusal expected: the ordered consumer deleting its previous
		// KUBE consumer when it resets (debug level; the server expires it).
		for _, l := range strings.Split(grepLines(p.Logs(), "ermissions Violation", "ermissions violation"), "\n") {
			if l != "" && !strings.Contains(l, "consumer delete refused") {
				t.Errorf("%s hit a permission it lacks: %s", svc, l)
			}
		}
	}
}

// routePortRefuses: the route port sends nothing in plain text (TLS comes
// before the route protocol's INFO) and answers no plain CONNECT/PING, and a
// TLS client that trusts the CA but presents no certificate is refused.
func routePortRefuses(t *testing.T, addr, caFile string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	_, _ = conn.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n"))
	got, _ := io.ReadAll(conn) // until the server closes or the deadline
	conn.Close()
	if strings.Contains(string(got), "INFO") || strings.Contains(string(got), "PONG") {
		t.Fatalf("the route port answered plain text: %q", got)
	}
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CA %s: %v", caFile, err)
	}
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err == nil {
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		// TLS 1.3: the server's refusal of the missing certificate comes with the first read.
		_, err = tc.Read(make([]byte, 1))
		tc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a route connection without a client certificate: %v, want refused for its certificate", err)
	}
	t.Logf("route port: nothing in plain text (%d bytes), no client certificate refused (%v)", len(got), err)
}

// productionNode is the production nats.conf (files from the rendered
// ConfigMap) for one node: loopback ports and storage of n, the
// certificates in certs, auth.conf inlined; tls false drops the cluster's
// TLS block (a plain-text route, to be refused).
func productionNode(t *testing.T, files map[string]string, n harness.NATSNode, certs string, tls bool) string {
	t.Helper()
	body := files["nats.conf"]
	for _, r := range []struct{ old, new string }{
		{"server_name: $POD_NAME", "server_name: " + n.Name},
		{"listen: 0.0.0.0:4222", "listen: 127.0.0.1:" + strconv.Itoa(n.ClientPort)},
		{"http: 127.0.0.1:8222", "http: 127.0.0.1:" + strconv.Itoa(n.HTTPPort)},
		{"pid_file: /var/run/nats/nats.pid", "pid_file: " + strconv.Quote(n.StoreDir+".pid")},
		{"store_dir: /data", "store_dir: " + strconv.Quote(n.StoreDir)},
		{"listen: 0.0.0.0:6222", "listen: 127.0.0.1:" + strconv.Itoa(n.RoutePort)},
		{"/etc/nats/tls/", certs + "/"},
		{"include ./auth.conf", files["auth.conf"]},
	} {
		if !strings.Contains(body, r.old) {
			t.Fatalf("the production nats.conf has no %q", r.old)
		}
		body = strings.ReplaceAll(body, r.old, r.new)
	}
	if !tls {
		i := strings.Index(body, "cluster {")
		j := strings.Index(body[i:], "  tls {")
		k := strings.Index(body[i+j:], "  }\n")
		if i < 0 || j < 0 || k < 0 {
			t.Fatal("no tls block in the production nats.conf's cluster block")
		}
		body = body[:i+j] + body[i+j+k+len("  }\n"):]
	}
	return body
}

// statefulSetRoutes are the route URLs NATS_ROUTE_0..2 of the rendered NATS
// StatefulSet, with the route password of the test.
func statefulSetRoutes(t *testing.T, objs []*unstructured.Unstructured) []*neturl.URL {
	t.Helper()
	ss := harness.FindObj(objs, "StatefulSet", "nats")
	if ss == nil {
		t.Fatal("no StatefulSet nats rendered")
	}
	containers, _, _ := unstructured.NestedSlice(ss.Object, "spec", "template", "spec", "containers")
	var out []*neturl.URL
	for _, c := range containers {
		env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
		for i := range 3 {
			for _, e := range env {
				m := e.(map[string]any)
				if m["name"] != fmt.Sprintf("NATS_ROUTE_%d", i) {
					continue
				}
				v := strings.ReplaceAll(m["value"].(string), "$(NATS_ROUTE_PASSWORD)", harness.DeployPasswords()["route"])
				u, err := neturl.Parse(v)
				if err != nil || u.User.Username() != "route" {
					t.Fatalf("NATS_ROUTE_%d %q: %v", i, m["value"], err)
				}
				out = append(out, u)
			}
		}
	}
	if len(out) != 3 {
		t.Fatalf("the StatefulSet has %d route URLs, want 3", len(out))
	}
	return out
}

// routePeers are the distinct server names node n has routes to (several
// pooled routes per pair), from its /routez.
func routePeers(t *testing.T, n harness.NATSNode) []string {
	t.Helper()
	rz := monitorJSON[struct {
		Routes []struct {
			RemoteName string `json:"remote_name"`
		} `json:"routes"`
	}](t, n, "/routez")
	seen := map[string]bool{}
	var out []string
	for _, r := range rz.Routes {
		if !seen[r.RemoteName] {
			seen[r.RemoteName] = true
			out = append(out, r.RemoteName)
		}
	}
	sort.Strings(out)
	return out
}

// monitorJSON decodes a monitoring endpoint of node n (an unreachable node
// reads as the zero value).
func monitorJSON[T any](t *testing.T, n harness.NATSNode, path string) T {
	t.Helper()
	var v T
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(n.HTTPPort)+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: %v", n.Name, path, err)
	}
	return v
}

// files0 is the production overlay's config.yml.
func files0(t *testing.T, prod []*unstructured.Unstructured) string {
	t.Helper()
	cm := harness.FindByPrefix(prod, "ConfigMap", "opswire-config-")
	if cm == nil {
		t.Fatal("ConfigMap opswire-config missing")
	}
	s, _, _ := unstructured.NestedString(cm.Object, "data", "config.yml")
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

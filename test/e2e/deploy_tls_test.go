package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployTLS: the production overlay's NATS configuration (TLS required,
// deploy/'s users and permissions) on a real nats-server with certificates
// from deploy/make-certs.sh; the five services start with the production
// Deployments' settings (OPSWIRE_NATS_TLS_CA), all connect over TLS with
// their inbox prefixes, and a cordon reaches Feishu. A plain connection is
// refused, and a service given another CA refuses the server with a clear
// error and no secret in its logs.
func TestDeployTLS(t *testing.T) {
	certs := makeCerts(t, "IP:127.0.0.1,DNS:localhost")
	otherCA := makeCerts(t, "IP:127.0.0.1,DNS:localhost")
	prod := harness.KustomizeBuild(t, deployPath(t, "overlays", "production"))
	dev := harness.KustomizeBuild(t, deployPath(t, "overlays", "dev"))
	pw := harness.DeployPasswords()
	n := harness.StartNATS(t, productionNATSConfig(t, prod, certs, pw))
	cp := harness.StartControlPlane(t)
	harness.ServerSideApply(t, cp.Config, prod) // namespace, service accounts, RBAC

	// The dev config.yml (one server: one stream replica), test intervals.
	cm := harness.FindByPrefix(dev, "ConfigMap", "opswire-config-")
	deployed, _, _ := unstructured.NestedString(cm.Object, "data", "config.yml")
	cfgPath := harness.WriteConfig(t, testConfigFrom(t, deployed))
	bot := feishutest.NewServer()
	t.Cleanup(bot.Close)
	botSecret := "tls-bot-secret-51d2"
	botURL := bot.AddBot("tls-bot-77aa", feishutest.Bot{Secret: botSecret})

	caFile := filepath.Join(certs, "ca.crt")
	procs := map[string]*harness.Process{}
	start := time.Now()
	for _, svc := range harness.Services {
		env := harness.DeploymentEnv(t, prod, "opswire-"+svc)
		if !strings.Contains(strings.Join(env, " "), "OPSWIRE_NATS_TLS_CA=") {
			t.Fatalf("opswire-%s: the production Deployment sets no OPSWIRE_NATS_TLS_CA", svc)
		}
		// The CA where the Deployment mounts it is here (the last value wins).
		env = append(env, "OPSWIRE_NATS_TLS_CA="+caFile, "OPSWIRE_NATS_PASSWORD="+pw[svc])
		o := harness.ServiceOptions{Config: cfgPath, NATSURL: n.URL, Env: env}
		if svc == "notifier" {
			o.Env = append(o.Env, "OPSWIRE_FEISHU_URL="+botURL, "OPSWIRE_FEISHU_SECRET="+botSecret)
		} else {
			o.Kubeconfig = cp.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc)
		}
		procs[svc] = harness.StartService(t, svc, o)
	}
	for _, svc := range harness.Services {
		procs[svc].WaitReady(t, 60*time.Second)
	}
	t.Logf("5 services started and ready over TLS in %v", time.Since(start).Round(time.Millisecond))

	// Every service's connection is TLS, with its own inbox prefix.
	connz, err := n.Server().Connz(&natsserver.ConnzOptions{Subscriptions: true, Username: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, c := range connz.Conns {
		svc := strings.TrimPrefix(strings.SplitN(c.Name, "/", 2)[0], "opswire-")
		if _, ok := procs[svc]; !ok {
			continue
		}
		seen[svc] = true
		if c.TLSVersion == "" {
			t.Errorf("%s (%s) connected without TLS", c.Name, c.AuthorizedUser)
		}
		for _, s := range c.Subs {
			if strings.HasPrefix(s, "_INBOX") && !strings.HasPrefix(s, "_INBOX_"+c.AuthorizedUser+".") {
				t.Errorf("%s subscribes to %s, outside _INBOX_%s.>", c.Name, s, c.AuthorizedUser)
			}
		}
	}
	if len(seen) != len(harness.Services) {
		t.Errorf("TLS connections of %v, want all of %v", seen, harness.Services)
	}

	// The pipeline works over TLS: a cordon, seen by the audit user, and its card.
	audit := connectTLS(t, n, caFile, nats.UserInfo("audit", pw["audit"]), nats.CustomInboxPrefix("_INBOX_audit"))
	ops := subscribeLive(t, audit, "ops.>")
	c := cp.Client
	harness.CreateNamespace(t, c, "shop")
	harness.CreateNode(t, c, harness.Node("tls-node-a", nil))
	for i := 0; i < 3; i++ { // maxPods 3
		harness.CreatePod(t, c, harness.Pod("shop", fmt.Sprintf("web-%d", i), "tls-node-a"))
	}
	ops.WaitFor(t, 30*time.Second, "cordon over TLS", harness.Subject("ops.default.cordon.cordoned.tls-node-a"))
	harness.Eventually(t, 30*time.Second, "a card naming tls-node-a", func() bool {
		for _, card := range bot.Cards("tls-bot-77aa") {
			if strings.Contains(card.Text(), "tls-node-a") {
				return true
			}
		}
		return false
	})

	// The server refuses a plain connection: it announces TLS as required
	// and never answers a plain-text PING.
	plainRefused(t, n.URL)

	// A service trusting another CA refuses the server: it never becomes
	// ready, says why, and leaks no password.
	wrong := harness.StartService(t, "notifier", harness.ServiceOptions{
		Config: cfgPath, NATSURL: n.URL, ID: "notifier-wrong-ca",
		Env: append(harness.DeploymentEnv(t, prod, "opswire-notifier"), "OPSWIRE_NATS_TLS_CA="+filepath.Join(otherCA, "ca.crt"),
			"OPSWIRE_NATS_PASSWORD="+pw["notifier"], "OPSWIRE_FEISHU_URL="+botURL, "OPSWIRE_FEISHU_SECRET="+botSecret),
	})
	harness.Eventually(t, 30*time.Second, "the wrong-CA notifier logs why it cannot connect", func() bool {
		logs := wrong.Logs()
		return strings.Contains(logs, "nats connect failed") && strings.Contains(logs, "certificate signed by unknown authority")
	})
	if code := readyz(t, wrong.HealthURL); code == http.StatusOK {
		t.Error("the notifier with the wrong CA is ready")
	}
	logs := wrong.Logs()
	for _, secret := range []string{pw["notifier"], botSecret, "tls-bot-77aa"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the wrong-CA notifier's logs contain a secret (%q…)", secret[:4])
		}
	}
	t.Logf("wrong CA: %s", grepLines(logs, "nats connect failed"))
	if connz, err := n.Server().Connz(nil); err == nil {
		for _, c := range connz.Conns {
			if strings.Contains(c.Name, "notifier-wrong-ca") {
				t.Errorf("the wrong-CA notifier is connected: %+v", c)
			}
		}
	}
	wrong.Stop()

	for svc, p := range procs {
		if logs := p.Logs(); strings.Contains(strings.ToLower(logs), "permissions violation") || strings.Contains(logs, "nats connect failed") {
			t.Errorf("%s logged a refused permission or connection:\n%s", svc, grepLines(logs, "ermission", "connect failed"))
		}
	}
	for svc, p := range procs {
		if code := p.Stop(); code != 0 {
			t.Errorf("%s exited %d on SIGTERM", svc, code)
		}
	}
}

// productionNATSConfig loads the production overlay's rendered NATS
// configuration (nats.conf with its TLS blocks, auth.conf) with the
// certificates in certs and the passwords in pw, as one server: the cluster
// block is dropped (one process cannot be three), the harness keeps its host,
// port and storage, and monitoring is off (tested by TestDeployManifests).
func productionNATSConfig(t *testing.T, objs []*unstructured.Unstructured, certs string, pw map[string]string) harness.NATSOption {
	t.Helper()
	cm := harness.FindByPrefix(objs, "ConfigMap", "nats-config-")
	if cm == nil {
		t.Fatal("ConfigMap nats-config missing")
	}
	dir := t.TempDir()
	files, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if !strings.Contains(files["nats.conf"], "/etc/nats/tls/tls.crt") {
		t.Fatal("the production nats.conf has no TLS certificate")
	}
	for name, body := range files {
		body = strings.ReplaceAll(body, "/etc/nats/tls/", certs+"/")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for u, p := range pw {
		t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", p)
	}
	t.Setenv("POD_NAME", "nats-0")
	for i := 0; i < 3; i++ {
		t.Setenv(fmt.Sprintf("NATS_ROUTE_%d", i), fmt.Sprintf("nats://route:x@nats-%d.nats-headless.opswire.svc:6222", i))
	}
	return func(o *natsserver.Options) error {
		fo, err := natsserver.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
		if err != nil {
			return err
		}
		if fo.TLSConfig == nil {
			return fmt.Errorf("the production nats.conf does not require TLS")
		}
		host, port, store := o.Host, o.Port, o.StoreDir
		*o = *fo
		o.Host, o.Port, o.StoreDir = host, port, store
		o.Cluster, o.Routes, o.RoutesStr = natsserver.ClusterOpts{}, nil, ""
		o.HTTPHost, o.HTTPPort = "", 0
		o.LameDuckDuration, o.LameDuckGracePeriod, o.PidFile = 0, 0, ""
		return nil
	}
}

// connectTLS is a test connection that trusts caFile.
func connectTLS(t *testing.T, n *harness.NATS, caFile string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return n.Connect(t, append([]nats.Option{nats.RootCAs(caFile)}, opts...)...)
}

func readyz(t *testing.T, base string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// plainRefused speaks the NATS protocol without TLS to url: the INFO line
// must say tls_required and a plain CONNECT/PING must get no PONG.
func plainRefused(t *testing.T, url string) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q (%v): want tls_required", info, err)
	}
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n")); err != nil {
		return // closed: refused
	}
	rest, _ := io.ReadAll(r) // until the server closes or the deadline
	if strings.Contains(string(rest), "PONG") {
		t.Errorf("the server answered a plain-text client: %q", rest)
	}
	t.Logf("plain connection refused (server sent %q)", strings.TrimSpace(string(rest)))
}

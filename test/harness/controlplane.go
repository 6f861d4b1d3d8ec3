package harness

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/opswire/opswire/shared/testport"
)

// ControlPlane is a running kube-apiserver with its etcd.
type ControlPlane struct {
	URL        string
	Token      string // admin bearer token (system:masters)
	Kubeconfig string // admin kubeconfig file
	Config     *rest.Config
	Client     kubernetes.Interface
	Dir        string
	EtcdURL    string // etcd's client URL (the test may compact it)
	AuditLog   string // the audit log file (WithAuditLog), else empty

	etcd, apiserver *proc
	apiBin, apiLog  string
	apiArgs         []string
	apiRestarts     int
	apiServers      int // started by AddAPIServer, for their logs' names
}

// StartControlPlane starts etcd and kube-apiserver on free loopback ports,
// waits for /readyz and registers teardown with t.Cleanup.
func StartControlPlane(t testing.TB, opts ...ControlPlaneOption) *ControlPlane {
	t.Helper()
	return startControlPlane(t, func() int { return testport.Must(t) }, opts...)
}

// startControlPlane is StartControlPlane with the ports from freePort (a
// test hands it one that is taken).
func startControlPlane(t testing.TB, freePort func() int, opts ...ControlPlaneOption) *ControlPlane {
	t.Helper()
	var o cpOptions
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	etcdBin := filepath.Join(bin, "etcd-"+EtcdVersion)
	if _, err := os.Stat(etcdBin); err != nil {
		t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", etcdBin)
	}
	apiBin := KubeBin(t, "kube-apiserver")
	dir, err := os.MkdirTemp("", "opswire-cp-")
	if err != nil {
		t.Fatal(err)
	}
	// Log paths first: their directory's cleanup must run after cp.stop.
	etcdLog, apiLog := logPath(t, "etcd.log"), logPath(t, "apiserver.log")
	cp := &ControlPlane{Dir: dir}
	t.Cleanup(func() { cp.stop(t) })

	if err := writeServiceAccountKey(dir); err != nil {
		t.Fatal(err)
	}
	cp.Token = randomHex(16)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(cp.Token+",admin,admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp.apiBin, cp.apiLog = apiBin, apiLog
	var extra []string
	if o.audit {
		args, file, err := auditArgs(dir, logPath(t, "audit.log"))
		if err != nil {
			t.Fatal(err)
		}
		extra, cp.AuditLog = args, file
	}
	// A free port can be taken between the pick and the bind (any process's
	// outgoing connection may land on it; seen once in the e2e run, on
	// kube-apiserver's port): etcd and kube-apiserver are started again on
	// new ports, etcd with a new data directory, up to three times.
	for attempt := 1; ; attempt++ {
		etcdPort, peerPort, apiPort := freePort(), freePort(), freePort()
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		cp.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdPort)
		cp.etcd = startLogged(t, etcdLog, etcdBin,
			"--data-dir", filepath.Join(dir, "etcd-"+strconv.Itoa(attempt)),
			"--listen-client-urls", cp.EtcdURL, "--advertise-client-urls", cp.EtcdURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", "default="+peerURL,
			"--log-level", "warn", "--quota-backend-bytes", strconv.Itoa(4<<30))
		cp.apiArgs = append([]string{"--secure-port", strconv.Itoa(apiPort), "--etcd-servers", cp.EtcdURL}, apiArgs(dir)...)
		cp.apiArgs = append(cp.apiArgs, extra...)
		cp.apiserver = startLogged(t, apiLog, apiBin, cp.apiArgs...)
		cp.URL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
		if cp.awaitReady(t, 90*time.Second, attempt < 3) {
			break
		}
		t.Logf("etcd (ports %d, %d) or kube-apiserver (port %d) could not bind a port taken since it was picked: starting both on others",
			etcdPort, peerPort, apiPort)
		cp.apiserver.terminate(15 * time.Second)
		cp.etcd.terminate(15 * time.Second)
	}

	cp.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.URL, cp.Token); err != nil {
		t.Fatal(err)
	}
	cp.Config = adminConfig(cp.URL, cp.Token)
	cp.Client = kubernetes.NewForConfigOrDie(cp.Config)
	// The default namespace and ServiceAccount exist before tests use them.
	Eventually(t, 30*time.Second, "namespace default", func() bool {
		_, err := cp.Client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil
	})
	return cp
}

// adminConfig is the client config of the admin token at url; its rate
// limit is high enough never to slow a test.
func adminConfig(url, token string) *rest.Config {
	return &rest.Config{Host: url, BearerToken: token, QPS: 500, Burst: 1000,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// apiArgs are kube-apiserver's flags but its port and etcd's URL.
func apiArgs(dir string) []string {
	return []string{
		"--bind-address", "127.0.0.1",
		"--cert-dir", filepath.Join(dir, "certs"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--disable-admission-plugins", "ServiceAccount",
		"--max-requests-inflight", "1000", "--max-mutating-requests-inflight", "500",
		"-v", "0"}
}

func (cp *ControlPlane) waitReady(t testing.TB, timeout time.Duration) {
	t.Helper()
	cp.awaitReady(t, timeout, false)
}

// awaitReady waits for /readyz. With portRetry, an etcd or kube-apiserver
// that exited because its port was taken returns false (both to be started
// on other ports); every other failure fails the test.
func (cp *ControlPlane) awaitReady(t testing.TB, timeout time.Duration, portRetry bool) bool {
	t.Helper()
	return awaitReadyz(t, cp.URL, cp.Token, timeout, portRetry,
		namedProc{"etcd", cp.etcd}, namedProc{"kube-apiserver", cp.apiserver})
}

// namedProc is a process awaitReadyz watches, by the name it reports.
type namedProc struct {
	name string
	proc *proc
}

// awaitReadyz waits for the kube-apiserver at url to answer /readyz. With
// portRetry, one of procs that exited because its port was taken returns
// false (to be started on another); every other exit fails the test, and so
// does the timeout (with the tails of the procs' logs).
func awaitReadyz(t testing.TB, url, token string, timeout time.Duration, portRetry bool, procs ...namedProc) bool {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequest(http.MethodGet, url+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		for _, p := range procs {
			if !p.proc.exited() {
				continue
			}
			if log := tail(p.proc.log, 40); portRetry && strings.Contains(log, "address already in use") {
				return false
			}
			t.Fatalf("%s exited:\n%s", p.name, tail(p.proc.log, 40))
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("kube-apiserver %s not ready after %v", url, timeout)
			for _, p := range procs {
				msg += fmt.Sprintf("\n%s:\n%s", p.name, tail(p.proc.log, 30))
			}
			t.Fatal(msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (cp *ControlPlane) stop(t testing.TB) {
	for _, p := range []*proc{cp.apiserver, cp.etcd} {
		p.terminate(15 * time.Second)
	}
	os.RemoveAll(cp.Dir)
}

// ServiceAccountKubeconfig creates the ServiceAccount if needed, requests a
// token for it (TokenRequest API) and writes a kubeconfig that authenticates as it.
func (cp *ControlPlane) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	return cp.ServiceAccountKubeconfigFor(t, namespace, name, cp.URL)
}

// ServiceAccountKubeconfigFor is ServiceAccountKubeconfig for the API server
// at url (one of cp's: AddAPIServer's share the token keys).
func (cp *ControlPlane) ServiceAccountKubeconfigFor(t testing.TB, namespace, name, url string) string {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if _, err := cp.Client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create service account %s/%s: %v", namespace, name, err)
	}
	expiry := int64(3600)
	tr, err := cp.Client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	file := "sa-" + namespace + "-" + name
	if url != cp.URL {
		file += "-" + unsafeName.ReplaceAllString(strings.TrimPrefix(url, "https://"), "_")
	}
	path := filepath.Join(cp.Dir, file+".kubeconfig")
	if err := writeKubeconfig(path, url, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeKubeconfig(path, url, token string) error {
	cfg := clientcmdConfig(url, token)
	return clientcmd.WriteToFile(*cfg, path)
}

func writeServiceAccountKey(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pub, 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	n := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n++
			if n > lines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

package harness

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opswire/opswire/shared/testport"
)

// APIServer is one more kube-apiserver of a ControlPlane, on the same etcd.
// A production control plane runs several (three, typically) behind one
// address, and each has its own watch cache fed by its own etcd watch: one
// can answer a read from a cache that lags another's. A client that moves
// from one server to another (a reconnect, a load balancer) can see time go
// back. AddAPIServer gives a test such servers; WithWatchHold makes one lag
// on demand.
type APIServer struct {
	URL        string
	Config     *rest.Config // admin (system:masters), as ControlPlane.Config
	Client     kubernetes.Interface
	Kubeconfig string // admin kubeconfig file

	cp       *ControlPlane
	name     string // apiserver2, apiserver3…: its log's name
	proc     *proc
	args     []string
	restarts int
	etcd     *etcdProxy // with WithWatchHold
}

// APIServerOption changes how AddAPIServer starts a server.
type APIServerOption func(*apiServerOptions)

type apiServerOptions struct {
	watchHold bool
}

// WithWatchHold puts a proxy between the server and etcd that can hold back
// what etcd sends on the server's watches (HoldWatch).
func WithWatchHold() APIServerOption {
	return func(o *apiServerOptions) { o.watchHold = true }
}

// AddAPIServer starts another kube-apiserver on cp's etcd with cp's flags
// (the service-account keys and tokens.csv too, so cp.Token and
// ServiceAccount tokens are good on every server) on a port of its own, and
// waits for /readyz. It stops on cleanup. (ControlPlane.StartAPIServer is
// the restart of cp's own server.)
//
// It does not take part in the "kubernetes" Service's endpoints (its port
// is not cp's: the two would rewrite them in turn), and it has no identity
// Lease in kube-system (APIServerIdentity off, and the mixed-version proxy
// that needs it): the API server names that Lease after the host, so it
// would be cp's server's, and the two would take it from each other. All
// servers run one version: nothing needs those Leases.
func (cp *ControlPlane) AddAPIServer(t testing.TB, opts ...APIServerOption) *APIServer {
	t.Helper()
	var o apiServerOptions
	for _, opt := range opts {
		opt(&o)
	}
	cp.apiServers++
	s := &APIServer{cp: cp, name: "apiserver" + strconv.Itoa(cp.apiServers+1)}
	etcdURL := cp.EtcdURL
	if o.watchHold {
		s.etcd = startEtcdProxy(t, cp.EtcdURL) // its cleanup runs after the server's
		etcdURL = s.etcd.URL
	}
	log := logPath(t, s.name+".log")
	t.Cleanup(func() { s.proc.terminate(15 * time.Second) })
	// A port taken between the pick and the bind: another one, as in
	// StartControlPlane.
	for attempt := 1; ; attempt++ {
		port := testport.Must(t)
		s.args = append([]string{"--secure-port", strconv.Itoa(port), "--etcd-servers", etcdURL,
			"--endpoint-reconciler-type", "none", "--feature-gates", "APIServerIdentity=false,UnknownVersionInteroperabilityProxy=false"}, apiArgs(cp.Dir)...)
		s.proc = startLogged(t, log, cp.apiBin, s.args...)
		s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
		if awaitReadyz(t, s.URL, cp.Token, 90*time.Second, attempt < 3, namedProc{"kube-apiserver " + s.name, s.proc}) {
			break
		}
		t.Logf("kube-apiserver %s could not bind port %d, taken since it was picked: starting it on another", s.name, port)
		s.proc.terminate(15 * time.Second)
	}
	s.Kubeconfig = filepath.Join(cp.Dir, s.name+".kubeconfig")
	if err := writeKubeconfig(s.Kubeconfig, s.URL, cp.Token); err != nil {
		t.Fatal(err)
	}
	s.Config = adminConfig(s.URL, cp.Token)
	s.Client = kubernetes.NewForConfigOrDie(s.Config)
	return s
}

// ServiceAccountKubeconfig is ControlPlane.ServiceAccountKubeconfig for this server.
func (s *APIServer) ServiceAccountKubeconfig(t testing.TB, namespace, name string) string {
	t.Helper()
	return s.cp.ServiceAccountKubeconfigFor(t, namespace, name, s.URL)
}

// HoldWatch holds back everything etcd sends on this server's watches
// (events, progress notifications, the answers to new watches) until
// ReleaseWatch: its watch cache stops at the revision it had, so the reads
// it serves from the cache (resourceVersion "0", a watch) lag, while those it
// sends to etcd (a GET, writes) do not. A consistent LIST waits for the
// cache 3 s, then asks etcd (kube-apiserver 1.37's default); a LIST at a
// resourceVersion newer than the cache waits as long, then answers 504 with
// a Retry-After (client-go retries it up to 10 times). The server needs
// WithWatchHold.
func (s *APIServer) HoldWatch() { s.watchProxy().hold(true) }

// ReleaseWatch sends the held answers on, in order: the cache catches up.
func (s *APIServer) ReleaseWatch() { s.watchProxy().hold(false) }

func (s *APIServer) watchProxy() *etcdProxy {
	if s.etcd == nil {
		panic("harness: HoldWatch on an API server started without WithWatchHold")
	}
	return s.etcd
}

// Stop stops the server (SIGTERM, SIGKILL after 15 s).
func (s *APIServer) Stop(t testing.TB) {
	t.Helper()
	s.proc.terminate(15 * time.Second)
	if !s.proc.exited() {
		t.Fatalf("kube-apiserver %s did not stop", s.name)
	}
}

// Restart stops the server if it runs and starts it again on the same port
// (a new log: <name>-<n>.log), waiting for /readyz. A hold stays as it is.
func (s *APIServer) Restart(t testing.TB) {
	t.Helper()
	s.proc.terminate(15 * time.Second)
	s.restarts++
	log := logPath(t, s.name+"-"+strconv.Itoa(s.restarts)+".log")
	s.proc = startLogged(t, log, s.cp.apiBin, s.args...)
	awaitReadyz(t, s.URL, s.cp.Token, 90*time.Second, false, namedProc{"kube-apiserver " + s.name, s.proc})
}

package harness

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/testport"
)

// DefaultControllers are the kube-controller-manager controllers
// StartControllers runs when the test names none: the workload controllers
// whose pods opswire watches, the ones that delete pods behind opswire's back
// in production (PodGC, the garbage collector, taint eviction), the node
// lifecycle controller that turns a silent node Unknown and taints it, and
// the service-account and namespace housekeeping that real clusters have.
// Canonical names (kube-controller-manager --help lists them); the old
// short aliases (deployment, podgc…) are accepted too.
var DefaultControllers = []string{
	"deployment-controller",
	"replicaset-controller",
	"daemonset-controller",
	"statefulset-controller",
	"job-controller",
	"pod-garbage-collector-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
	"garbage-collector-controller",
	"endpointslice-controller",
	"serviceaccount-token-controller",
	"serviceaccount-controller",
	"namespace-controller",
	"root-ca-certificate-publisher-controller",
}

// ControllerOptions choose what StartControllers runs. A zero field keeps
// the Kubernetes release's default, so a test states only the timings it
// depends on.
type ControllerOptions struct {
	// Controllers is kube-controller-manager's --controllers; nil:
	// DefaultControllers.
	Controllers []string
	// Scheduler also starts kube-scheduler, so that pods the controllers
	// create are bound to nodes (they stay Pending: there is no kubelet).
	Scheduler bool

	// The node lifecycle controller's timings: how often it looks at every
	// node (default 5s), how long a node's Lease and Ready heartbeat may stay
	// unrenewed before it is marked Unknown (default 50s), and the same for a
	// node that never posted a Ready condition (default 1m).
	NodeMonitorPeriod      time.Duration
	NodeMonitorGracePeriod time.Duration
	NodeStartupGracePeriod time.Duration
	// NodeEvictionRate is how many nodes a second get the NoExecute taint
	// (default 0.1: one at once, the next 10 s later).
	NodeEvictionRate float32
	// TerminatedPodGCThreshold is how many terminated pods PodGC keeps
	// (default 12500); negative disables that part of PodGC.
	TerminatedPodGCThreshold int
	// KubeAPIQPS and KubeAPIBurst limit each controller's client (defaults
	// 20 and 30: a DaemonSet on thousands of nodes is slow at that rate).
	KubeAPIQPS   float32
	KubeAPIBurst int

	// LeaseRenewInterval is how often the harness renews the Lease of every
	// fake node; zero: a fifth of the grace period, as a kubelet's 10 s
	// renewals are of the default 50 s.
	LeaseRenewInterval time.Duration
	// Verbosity is the components' -v; zero: 2, where the node lifecycle
	// controller and PodGC log their decisions.
	Verbosity int
	// ExtraArgs are appended to kube-controller-manager's flags.
	ExtraArgs []string
}

// Controllers are the running controller processes of one control plane.
type Controllers struct {
	ManagerLog   string // kube-controller-manager's log
	SchedulerLog string // kube-scheduler's log; empty without Scheduler
	Leases       *NodeLeases
}

// StartControllers starts kube-controller-manager (and kube-scheduler with
// opts.Scheduler) of KubeVersion against cp, waits until they serve
// /healthz, and keeps every node alive with KeepNodesAlive, as kubelets
// would: the harness's nodes have no kubelet, and the node lifecycle
// controller would otherwise mark them Unknown after the grace period. All
// of it stops on t's cleanup.
func (cp *ControlPlane) StartControllers(t testing.TB, opts ControllerOptions) *Controllers {
	t.Helper()
	kcm := KubeBin(t, "kube-controller-manager")
	var sched string
	if opts.Scheduler {
		sched = KubeBin(t, "kube-scheduler")
	}
	caFile := cp.RootCAFile(t)
	grace := opts.NodeMonitorGracePeriod
	if grace == 0 {
		grace = 50 * time.Second
	}
	renew := opts.LeaseRenewInterval
	if renew == 0 {
		renew = grace / 5
	}
	// Leases before the controller (KeepNodesAlive says why).
	c := &Controllers{Leases: cp.KeepNodesAlive(t, renew)}
	c.ManagerLog = logPath(t, "controller-manager.log")
	startServing(t, "kube-controller-manager", c.ManagerLog, kcm, func(port int) []string {
		return append(controllerManagerArgs(cp, caFile, port, opts), opts.ExtraArgs...)
	})
	if opts.Scheduler {
		cfg := filepath.Join(cp.Dir, "scheduler.yaml")
		if err := os.WriteFile(cfg, []byte(schedulerConfig(cp.Kubeconfig, opts)), 0o600); err != nil {
			t.Fatal(err)
		}
		c.SchedulerLog = logPath(t, "scheduler.log")
		startServing(t, "kube-scheduler", c.SchedulerLog, sched, func(port int) []string {
			return []string{"--config", cfg, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
				"-v", strconv.Itoa(verbosity(opts))}
		})
	}
	return c
}

// controllerManagerArgs are kube-controller-manager's flags. Each
// controller acts as its own ServiceAccount (--use-service-account-
// credentials), so the API server's RBAC bootstrap roles apply as in a real
// cluster; the tokens come from the TokenRequest API, signed with the API
// server's key, which the serviceaccount-token controller signs legacy
// token Secrets with too.
func controllerManagerArgs(cp *ControlPlane, caFile string, port int, o ControllerOptions) []string {
	controllers := o.Controllers
	if controllers == nil {
		controllers = DefaultControllers
	}
	args := []string{
		"--kubeconfig", cp.Kubeconfig,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(port),
		"--leader-elect=false",
		"--controllers", strings.Join(controllers, ","),
		"--use-service-account-credentials",
		"--service-account-private-key-file", filepath.Join(cp.Dir, "sa.key"),
		"--root-ca-file", caFile,
		"-v", strconv.Itoa(verbosity(o)),
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--node-monitor-period", o.NodeMonitorPeriod},
		{"--node-monitor-grace-period", o.NodeMonitorGracePeriod},
		{"--node-startup-grace-period", o.NodeStartupGracePeriod},
	} {
		if d.v != 0 {
			args = append(args, d.flag, d.v.String())
		}
	}
	if o.NodeEvictionRate != 0 {
		args = append(args, "--node-eviction-rate", strconv.FormatFloat(float64(o.NodeEvictionRate), 'f', -1, 32))
	}
	switch {
	case o.TerminatedPodGCThreshold > 0:
		args = append(args, "--terminated-pod-gc-threshold", strconv.Itoa(o.TerminatedPodGCThreshold))
	case o.TerminatedPodGCThreshold < 0:
		args = append(args, "--terminated-pod-gc-threshold", "0")
	}
	if o.KubeAPIQPS != 0 {
		args = append(args, "--kube-api-qps", strconv.FormatFloat(float64(o.KubeAPIQPS), 'f', -1, 32))
	}
	if o.KubeAPIBurst != 0 {
		args = append(args, "--kube-api-burst", strconv.Itoa(o.KubeAPIBurst))
	}
	return args
}

// schedulerConfig is a KubeSchedulerConfiguration: the file is the
// supported way to give kube-scheduler its kubeconfig and turn off leader
// election (the flags are deprecated).
func schedulerConfig(kubeconfig string, o ControllerOptions) string {
	s := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n" +
		"leaderElection:\n  leaderElect: false\n" +
		"clientConnection:\n  kubeconfig: " + strconv.Quote(kubeconfig) + "\n"
	if o.KubeAPIQPS != 0 {
		s += "  qps: " + strconv.FormatFloat(float64(o.KubeAPIQPS), 'f', -1, 32) + "\n"
	}
	if o.KubeAPIBurst != 0 {
		s += "  burst: " + strconv.Itoa(o.KubeAPIBurst) + "\n"
	}
	return s
}

func verbosity(o ControllerOptions) int {
	if o.Verbosity == 0 {
		return 2
	}
	return o.Verbosity
}

// RootCAFile writes (once) and returns cp.Dir/ca.crt: the CA that signed
// kube-apiserver's serving certificate. kube-apiserver generates both into
// its --cert-dir (apiserver.crt holds the serving certificate, then the CA);
// this is the bundle a pod would trust, which kube-controller-manager's
// --root-ca-file puts into token Secrets and kube-root-ca.crt ConfigMaps.
func (cp *ControlPlane) RootCAFile(t testing.TB) string {
	t.Helper()
	out := filepath.Join(cp.Dir, "ca.crt")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	chain, err := os.ReadFile(filepath.Join(cp.Dir, "certs", "apiserver.crt"))
	if err != nil {
		t.Fatalf("kube-apiserver's serving certificate: %v", err)
	}
	ca, err := caCerts(chain)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Join(cp.Dir, "certs", "apiserver.crt"), err)
	}
	if err := os.WriteFile(out, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// caCerts returns the PEM blocks of chain that are CA certificates.
func caCerts(chain []byte) ([]byte, error) {
	var out []byte
	for rest := chain; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		if c.IsCA {
			out = append(out, pem.EncodeToMemory(b)...)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no CA certificate in the chain")
	}
	return out, nil
}

// startServing starts a component that serves https /healthz on the
// loopback port it is given and waits until that answers 200. A port taken
// between the pick and the bind gets the component started again on
// another one (up to three tries), as etcd and kube-apiserver are. The
// process stops on t's cleanup.
func startServing(t testing.TB, name, logFile, bin string, args func(port int) []string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for attempt := 1; ; attempt++ {
		port := testport.Must(t)
		p := startLogged(t, logFile, bin, args(port)...)
		t.Cleanup(func() { p.terminate(15 * time.Second) })
		url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
		deadline := time.Now().Add(90 * time.Second)
		for {
			if resp, err := client.Get(url); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
			if p.exited() {
				log := tail(logFile, 40)
				if attempt < 3 && strings.Contains(log, "address already in use") {
					t.Logf("%s could not bind port %d, taken since it was picked: starting it on another", name, port)
					break
				}
				t.Fatalf("%s exited:\n%s", name, log)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not serve %s after 90s:\n%s", name, url, tail(logFile, 40))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

package e2e

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/opswire/opswire/test/harness"
)

// deleteCounter is a reverse proxy in front of the API server that records
// every pod DELETE it forwards, with the answer's status: deletions counted
// at the source, where neither the stream's deduplication nor a lost audit
// can hide one.
type deleteCounter struct {
	mu      sync.Mutex
	deletes []podDelete
}

type podDelete struct {
	pod    string // namespace/name
	status int
	at     time.Time
}

// startDeleteCounter starts the proxy and returns a copy of kubeconfig that
// points at it.
func startDeleteCounter(t *testing.T, cp *harness.ControlPlane, kubeconfig string) (*deleteCounter, string) {
	t.Helper()
	target, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	dc := &deleteCounter{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // the test API server's own certificate
	proxy.ModifyResponse = func(resp *http.Response) error {
		r := resp.Request
		// DELETE /api/v1/namespaces/<ns>/pods/<name>
		if parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/"); r.Method == http.MethodDelete && len(parts) == 6 && parts[4] == "pods" {
			dc.mu.Lock()
			dc.deletes = append(dc.deletes, podDelete{pod: parts[3] + "/" + parts[5], status: resp.StatusCode, at: time.Now()})
			dc.mu.Unlock()
		}
		return nil
	}
	// TLS like the API server: client-go sends no bearer token over plain http.
	srv := httptest.NewTLSServer(proxy)
	t.Cleanup(srv.Close)
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server, c.InsecureSkipTLSVerify, c.CertificateAuthorityData = srv.URL, true, nil
	}
	path := kubeconfig + ".counted"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return dc, path
}

// successful returns the times of the DELETEs the API server accepted, by pod.
func (dc *deleteCounter) successful() map[string][]time.Time {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	out := map[string][]time.Time{}
	for _, d := range dc.deletes {
		if d.status >= 200 && d.status < 300 {
			out[d.pod] = append(out[d.pod], d.at)
		}
	}
	return out
}

// TestCleanupFailover: 100 evicted pods, at most 20 deletions per 10 s
// window, two replicas. The leader is SIGKILLed once it has used up the first
// window; the standby takes over inside that window and must count the dead
// leader's deletions (it reads them from OPS). No 10 s window sees more than
// 20 DELETEs (counted at the API, through a proxy), and every pod is deleted
// once and audited in OPS exactly once.
func TestCleanupFailover(t *testing.T) {
	const total, perWindow, window = 100, 20, 10 * time.Second
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "bulk")
	cfg := harness.WriteConfig(t, cleanupConfig(fmt.Sprintf("maxDeletionsPerMinute: %d", perWindow), "rateWindow: 10s"))
	startWatcher(t, cp, n, cfg, "w1")
	for i := range total {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("ev-%03d", i), worker.Name)))
	}
	harness.Eventually(t, 30*time.Second, "all evictions in KUBE", func() bool {
		for i := range total {
			if s := lastPod(t, n.JS, fmt.Sprintf("kube.e2e.pod.bulk.ev-%03d", i)); s == nil || s.Phase != "Failed" {
				return false
			}
		}
		return true
	})
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	counter, kc := startDeleteCounter(t, cp, cleanupKubeconfig(t, cp))
	procs := map[string]*harness.Process{"a": startCleanup(t, n, cfg, kc, "a"), "b": startCleanup(t, n, cfg, kc, "b")}
	leaderID, leader := waitLeader(t, cp, procs)
	deleted := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cleanup.deleted.bulk.") }

	// The first window's deletions, audited: then kill the leader.
	harness.Eventually(t, 15*time.Second, "first window used up", func() bool { return ops.Count(deleted) >= perWindow })
	leader.Kill()
	killed := time.Now()
	standby := map[string]*harness.Process{}
	for id, p := range procs {
		if id != leaderID {
			standby[id] = p
		}
	}
	_, next := waitLeader(t, cp, standby)
	t.Logf("leader %s killed; standby leading after %v", leaderID, time.Since(killed).Round(time.Millisecond))

	harness.Eventually(t, 90*time.Second, "every pod deleted", func() bool {
		for i := range total {
			if podExists(t, cp, "bulk", fmt.Sprintf("ev-%03d", i)) {
				return false
			}
		}
		return true
	})

	// At the source: each pod deleted exactly once, and no window of 10 s holds
	// more than 20 of those DELETEs (a small tolerance for the proxy's clock
	// reading against the actor's).
	var times []time.Time
	for pod, ts := range counter.successful() {
		if len(ts) != 1 {
			t.Fatalf("%s: %d successful DELETEs, want 1", pod, len(ts))
		}
		times = append(times, ts[0])
	}
	if len(times) != total {
		t.Fatalf("%d pods deleted through the API, want %d", len(times), total)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	const slack = 250 * time.Millisecond
	for i := 0; i+perWindow < len(times); i++ {
		if gap := times[i+perWindow].Sub(times[i]); gap < window-slack {
			t.Fatalf("DELETEs %d and %d only %v apart: more than %d in a %v window across the failover", i, i+perWindow, gap, perWindow, window)
		}
	}
	// In OPS: each pod exactly once, by subject (one id per pod, so the
	// deleted count above is what rules out a repeat the stream would drop).
	harness.Eventually(t, 10*time.Second, "every deletion audited", func() bool { return ops.Count(deleted) >= total })
	perPod := map[string]int{}
	for _, m := range ops.All() {
		perPod[m.Subject]++
	}
	for i := range total {
		if c := perPod[fmt.Sprintf("ops.e2e.cleanup.deleted.bulk.ev-%03d", i)]; c != 1 {
			t.Fatalf("ev-%03d audited %d times in OPS, want 1:\n%s", i, c, ops.Describe())
		}
	}
	if len(perPod) != total {
		t.Fatalf("%d OPS subjects, want only the %d deletions:\n%s", len(perPod), total, ops.Describe())
	}
	// The new leader took over inside the dead leader's window and counted its deletions.
	if v := next.Metric("opswire_rate_window_seeded_actions"); v != perWindow {
		t.Fatalf("new leader's window seeded with %v deletions from OPS, want %d", v, perWindow)
	}
	t.Logf("100 deletions over %v", times[total-1].Sub(times[0]).Round(time.Millisecond))
}

package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// Lease timing of the API-outage test: the outage outlasts renewDeadline and
// leaseDuration, so every leader loses its lease and every lease expires.
const (
	outageLease         = 4 * time.Second
	outageRenewDeadline = 3 * time.Second
)

// TestFaultAPIServerOutageLeaders kills kube-apiserver for longer than the
// lease duration while two replicas of the watcher, cleanup, cordon and
// report run. Every leader must stop acting within renewDeadline, no process
// may exit (each campaigns again), and after the restart exactly one replica
// per service leads and acts: the work handed over after the restart (pods
// evicted, a node overfilled, a report requested) is done once, and every
// write comes from the lease holder. Writes are counted at one proxy per
// replica in front of the API, so it is known who wrote what.
func TestFaultAPIServerOutageLeaders(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	bots := feishutest.NewServer()
	t.Cleanup(bots.Close)
	bot := bots.AddBot("outage-bot-token-4e1", feishutest.Bot{})
	for _, name := range []string{"worker-a", "worker-b", "worker-c"} {
		harness.CreateNode(t, cp.Client, harness.Node(name, nil))
	}
	harness.CreateNamespace(t, cp.Client, "apps")
	for i := range 3 {
		harness.CreatePod(t, cp.Client, harness.Pod("apps", fmt.Sprintf("ev-%d", i), "worker-b"))
		harness.CreatePod(t, cp.Client, harness.Pod("apps", fmt.Sprintf("run-%d", i), "worker-c"))
	}
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: %s
  renewDeadline: %s
  retryPeriod: 300ms
autoCordon:
  enable: true
  interval: 2s
  maxPods: 5
  minPods: 2
delException:
  interval: 1s
  minAge: 0s
  apiurl: "%s"
sendReport:
  total: 3
  schedule: "0 0 10 * * 1"
  apiurl: "%s"
`, outageLease, outageRenewDeadline, bot, bot))

	cleanupKC, cordonKC := cleanupKubeconfig(t, cp), cordonRBAC(t, cp, "default")
	services := []string{"watcher", "cleanup", "cordon", "report"}
	procs := map[string]map[string]*harness.Process{}
	proxies := map[string]*harness.APIProxy{} // per replica of the two actors that write
	for _, svc := range services {
		procs[svc] = map[string]*harness.Process{}
		for _, id := range []string{svc + "-a", svc + "-b"} {
			kc := cp.Kubeconfig
			switch svc {
			case "cleanup", "cordon":
				proxies[id] = harness.StartAPIProxy(t, cp)
				kc = proxies[id].Kubeconfig(t, map[string]string{"cleanup": cleanupKC, "cordon": cordonKC}[svc])
			}
			procs[svc][id] = harness.StartService(t, svc, harness.ServiceOptions{Config: cfg, Kubeconfig: kc, NATSURL: n.URL, ID: id})
		}
	}
	for _, ps := range procs {
		for _, p := range ps {
			p.WaitReady(t, 90*time.Second)
		}
	}
	leading := func(svc string) (ids []string) {
		for id, p := range procs[svc] {
			if p.Metric("opswire_leader") == 1 {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		return ids
	}
	before := map[string]string{}
	for _, svc := range services {
		harness.Eventually(t, 30*time.Second, svc+" leader", func() bool {
			l := leading(svc)
			return len(l) == 1 && harness.LeaseHolder(cp.Client, "default", "opswire-"+svc) == l[0]
		})
		before[svc] = leading(svc)[0]
	}
	waitConverged(t, cp, n.JS, time.Now(), 30*time.Second)

	// The outage: every leader must stop acting (opswire_leader 0) within
	// renewDeadline and count a lost term; no process exits and /healthz
	// answers throughout.
	cp.KillAPIServer(t)
	down := time.Now()
	stopped := map[string]time.Duration{}
	harness.Eventually(t, 30*time.Second, "every leader to step down", func() bool {
		for _, svc := range services {
			if _, ok := stopped[svc]; !ok && procs[svc][before[svc]].Metric("opswire_leader") == 0 {
				stopped[svc] = time.Since(down)
			}
		}
		return len(stopped) == len(services)
	})
	for svc, d := range stopped {
		// The last renewal was at most a retryPeriod before the kill; the
		// scrape of eight processes and a loaded machine take the rest.
		if d > outageRenewDeadline+2*time.Second {
			t.Errorf("%s: the leader stopped acting %v after the API died, want within renewDeadline %v", svc, d, outageRenewDeadline)
		}
	}
	alive := func() {
		t.Helper()
		for _, ps := range procs {
			for _, p := range ps {
				if p.Exited() {
					t.Fatalf("%s exited during the API outage:\n%s", p.Name, tailLines(p.Logs(), 30))
				}
				if code := httpStatus(p.HealthURL + "/healthz"); code != http.StatusOK {
					t.Fatalf("%s /healthz answered %d during the API outage", p.Name, code)
				}
			}
		}
	}
	// Held past the lease duration (every lease expired, a standby may take
	// it), checking the processes meanwhile.
	harness.Eventually(t, 60*time.Second, "the outage to outlast the lease", func() bool {
		alive()
		for _, svc := range services {
			if l := leading(svc); len(l) != 0 {
				t.Fatalf("%s: %v lead while the API is down", svc, l)
			}
			if procs[svc][before[svc]].Metric("opswire_leader_lost_total") < 1 {
				return false
			}
		}
		return time.Since(down) > outageLease+time.Second
	})
	cp.StartAPIServer(t)
	back := time.Now()
	outage := back.Sub(down)

	// One leader per service again.
	after, took := map[string]string{}, map[string]time.Duration{}
	for _, svc := range services {
		harness.Eventually(t, 60*time.Second, svc+" leader after the outage", func() bool {
			l := leading(svc)
			return len(l) == 1 && harness.LeaseHolder(cp.Client, "default", "opswire-"+svc) == l[0]
		})
		after[svc], took[svc] = leading(svc)[0], time.Since(back)
	}
	// Work handed over after the restart: 3 pods evicted, worker-a
	// overfilled, a report requested.
	for i := range 3 {
		evict(t, cp, mustGetPod(t, cp, "apps", fmt.Sprintf("ev-%d", i)))
	}
	cordonFill(t, cp.Client, "worker-a", 0, 6)
	requestReport(t, n, "e2e")
	harness.Eventually(t, 60*time.Second, "the 3 evicted pods deleted", func() bool {
		for i := range 3 {
			if harness.PodExists(t, cp.Client, "apps", fmt.Sprintf("ev-%d", i)) {
				return false
			}
		}
		return true
	})
	harness.Eventually(t, 60*time.Second, "worker-a cordoned", func() bool { return harness.GetNode(t, cp.Client, "worker-a").Spec.Unschedulable })
	waitConverged(t, cp, n.JS, back, 60*time.Second)
	harness.Never(t, 2*time.Second, "two leaders of one service", func() bool {
		for _, svc := range services {
			if len(leading(svc)) > 1 {
				return true
			}
		}
		return false
	})

	// Who wrote what, counted at each replica's proxy.
	writes := func(id string) []string {
		var out []string
		for _, r := range proxies[id].Requests(func(r harness.APIRequest) bool {
			return (r.Method == http.MethodDelete && strings.Contains(r.Path, "/pods/")) ||
				(r.Method == http.MethodPatch && strings.HasPrefix(r.Path, "/api/v1/nodes/"))
		}) {
			out = append(out, r.Method+" "+r.Path)
		}
		return out
	}
	for _, svc := range []string{"cleanup", "cordon"} {
		for id := range procs[svc] {
			if w := writes(id); id != after[svc] && len(w) > 0 {
				t.Errorf("%s: %s, not the lease holder %s, wrote %v", svc, id, after[svc], w)
			}
		}
	}
	for i := range 3 {
		d := 0
		for _, id := range []string{"cleanup-a", "cleanup-b"} {
			d += doneDeletesOf(proxies[id], "apps", fmt.Sprintf("ev-%d", i))
		}
		if d != 1 {
			t.Errorf("apps/ev-%d: %d successful DELETEs, want 1", i, d)
		}
	}
	if w := writes(after["cleanup"]); len(w) != 3 {
		t.Errorf("cleanup leader's writes %v, want the 3 DELETEs of the evicted pods only", w)
	}
	if w := writes(after["cordon"]); len(w) != 1 || w[0] != "PATCH /api/v1/nodes/worker-a" {
		t.Errorf("cordon leader's writes %v, want one PATCH of worker-a", w)
	}
	alive()

	// Phase 2: only the actors' leaders lose the API (their proxies cut):
	// the standbys take over within the lease, as after a crash, while the
	// cut-off replicas keep campaigning; once back they stay standbys.
	cutAt := time.Now()
	writesBefore := map[string]int{}
	for _, svc := range []string{"cleanup", "cordon"} {
		writesBefore[after[svc]] = len(writes(after[svc]))
		proxies[after[svc]].Cut()
	}
	takeover := map[string]time.Duration{}
	for _, svc := range []string{"cleanup", "cordon"} {
		harness.Eventually(t, 30*time.Second, svc+" standby to take over from the cut-off leader", func() bool {
			l := leading(svc)
			return len(l) == 1 && l[0] != after[svc] && harness.LeaseHolder(cp.Client, "default", "opswire-"+svc) == l[0]
		})
		takeover[svc] = time.Since(cutAt)
	}
	evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", "ev-cut", "worker-c")))
	harness.Eventually(t, 60*time.Second, "apps/ev-cut deleted by the new leader", func() bool { return !harness.PodExists(t, cp.Client, "apps", "ev-cut") })
	for _, svc := range []string{"cleanup", "cordon"} {
		proxies[after[svc]].Restore()
	}
	harness.Never(t, 3*time.Second, "a cut-off replica leading again", func() bool {
		for _, svc := range []string{"cleanup", "cordon"} {
			if l := leading(svc); len(l) != 1 || l[0] == after[svc] {
				return true
			}
		}
		return false
	})
	for _, svc := range []string{"cleanup", "cordon"} {
		if w := writes(after[svc]); len(w) != writesBefore[after[svc]] {
			t.Errorf("%s: %s wrote %v after it was cut off", svc, after[svc], w[writesBefore[after[svc]]:])
		}
	}
	d := 0
	for _, id := range []string{"cleanup-a", "cleanup-b"} {
		d += doneDeletesOf(proxies[id], "apps", "ev-cut")
	}
	if d != 1 {
		t.Errorf("apps/ev-cut: %d successful DELETEs, want 1", d)
	}
	alive()
	t.Logf("leaders cut off from the API: standbys took over in %v (cleanup) and %v (cordon), bound lease %v + 2 s; "+
		"apps/ev-cut deleted once, by the new leader", takeover["cleanup"].Round(time.Millisecond),
		takeover["cordon"].Round(time.Millisecond), outageLease)
	for svc, d := range takeover {
		if d > outageLease+2*time.Second+time.Second {
			t.Errorf("%s: takeover %v after the leader was cut off", svc, d)
		}
	}

	for _, svc := range services {
		t.Logf("%-7s leader %s before, stepped down %v after the API stopped (renewDeadline %v); %s leads %v after the restart "+
			"(terms: %s %v, %s %v)", svc, before[svc], stopped[svc].Round(time.Millisecond), outageRenewDeadline, after[svc],
			took[svc].Round(time.Millisecond), svc+"-a", procs[svc][svc+"-a"].Metric("opswire_leader_terms_total"),
			svc+"-b", procs[svc][svc+"-b"].Metric("opswire_leader_terms_total"))
	}
	t.Logf("kube-apiserver down %v (lease %v); no process exited; 3 DELETEs and 1 PATCH, all by the lease holders",
		outage.Round(time.Millisecond), outageLease)
}

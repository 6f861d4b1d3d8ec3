package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/test/harness"
)

// decisionsMetric is the series of opswire_cleanup_decisions_total for one
// verb and reason: counted in the process, so a repeat the stream would drop
// as a duplicate still shows.
func decisionsMetric(verb, reason string) string {
	return fmt.Sprintf(`opswire_cleanup_decisions_total{reason=%q,verb=%q}`, reason, verb)
}

// TestCleanupBrake: with four of six nodes not Ready, stuck pods are held
// (each reported once, metric and log say the brake is on); when only one
// node is left not Ready the brake releases by itself and the held pods are
// force-deleted.
func TestCleanupBrake(t *testing.T) {
	cp, ops, leader, nodes := brakedCluster(t)
	// One stuck pod on each node but the last: four on not-Ready nodes, one on a Ready node.
	var deadline time.Time
	held := nodes[:5]
	for i, node := range held {
		name := fmt.Sprintf("stuck-%d", i)
		harness.CreatePod(t, cp.Client, harness.Pod("apps", name, node))
		deadline = deleteGracefully(t, cp, "apps", name).Add(4 * time.Second)
	}
	anyGone := func() bool {
		for i := range held {
			if !harness.PodExists(t, cp.Client, "apps", fmt.Sprintf("stuck-%d", i)) {
				return true
			}
		}
		return false
	}
	harness.Never(t, time.Until(deadline.Add(4*time.Second)), "a force deletion while 4 of 6 nodes are not Ready", anyGone)
	for i := range held {
		m := ops.WaitFor(t, 5*time.Second, "held pod reported", opsFor("skipped", "apps", fmt.Sprintf("stuck-%d", i)))
		if d := decision(t, m); d.Reason != "MassNodeFailure" || !strings.Contains(d.Message, "4 of 6 nodes") {
			t.Fatalf("decision %+v", d)
		}
	}
	// Every held pod was examined several times (1 s tick): reported once each.
	if v := leader.Metric(decisionsMetric("skipped", "MassNodeFailure")); v != float64(len(held)) {
		t.Fatalf("MassNodeFailure skips counted %v, want %d (once per pod)", v, len(held))
	}
	if !strings.Contains(leader.Logs(), "mass-failure brake on") {
		t.Fatal("no log line says the brake is on")
	}

	for _, name := range nodes[1:4] {
		setNodeReady(t, cp, name, corev1.ConditionTrue)
	}
	harness.Eventually(t, 10*time.Second, "held pods force-deleted after the release", func() bool {
		for i := range held {
			if harness.PodExists(t, cp.Client, "apps", fmt.Sprintf("stuck-%d", i)) {
				return false
			}
		}
		return true
	})
	for i := range held {
		ops.WaitFor(t, 5*time.Second, "forcedeleted decision", opsFor("forcedeleted", "apps", fmt.Sprintf("stuck-%d", i)))
	}
	if v := leader.Metric("opswire_cleanup_brake_engaged"); v != 0 {
		t.Fatalf("brake metric %v after the release, want 0", v)
	}
	if v := leader.Metric(decisionsMetric("skipped", "MassNodeFailure")); v != float64(len(held)) {
		t.Fatalf("MassNodeFailure skips counted %v after the release, want %d", v, len(held))
	}
	if !strings.Contains(leader.Logs(), "mass-failure brake released") {
		t.Fatal("no log line says the brake was released")
	}
}

// TestCleanupFinalizerPath: with removeFinalizers, Evicted pods holding a
// finalizer are removed once each, each write audited once (OPS message and
// Event), and the cap (2 per 3 s window) holds over every write. Three are
// plain Evicted pods: the first visit deletes them and leaves the finalizer
// to its controller (deletionrequested; the pod stays Terminating, grace 0);
// only once they have been Terminating for terminatingTimeout is the
// finalizer cleared, and the API server removes them during that update
// (forcedeleted). Two were already deleted by someone else with grace 0 and
// are past terminatingTimeout: cleared and removed the same way, with no
// DELETE after (the DELETE that followed used to find nothing and give the
// slot back, unaudited).
func TestCleanupFinalizerPath(t *testing.T) {
	const total, perWindow, window = 5, 2, 3 * time.Second
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "fin")
	cfg := harness.WriteConfig(t, cleanupConfig("maxDeletionsPerMinute: 2", "rateWindow: 3s", "removeFinalizers: true"))
	startWatcher(t, cp, n, cfg, "w1")
	ctx := context.Background()
	uids := map[string]string{}
	var lastDeletion time.Time
	for i := range total {
		name := fmt.Sprintf("fin-%d", i)
		p := harness.Pod("fin", name, worker.Name)
		p.Finalizers = []string{"example.com/hold"}
		created := harness.CreatePod(t, cp.Client, p)
		evict(t, cp, created)
		uids[name] = string(created.UID)
		if i >= 3 {
			if err := cp.Client.CoreV1().Pods("fin").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			live, err := cp.Client.CoreV1().Pods("fin").Get(ctx, name, metav1.GetOptions{})
			if err != nil || live.DeletionTimestamp == nil || live.DeletionGracePeriodSeconds == nil || *live.DeletionGracePeriodSeconds != 0 {
				t.Fatalf("%s: want Terminating with grace 0 (a terminal pod), got %+v %v", name, live.ObjectMeta, err)
			}
			lastDeletion = live.DeletionTimestamp.Time
		}
	}
	harness.Eventually(t, 20*time.Second, "all pods Failed in KUBE", func() bool {
		for name := range uids {
			if s := lastPod(t, n.JS, "kube.e2e.pod.fin."+name); s == nil || s.Phase != "Failed" {
				return false
			}
		}
		return true
	})
	// Start the actor once the two pre-deleted pods are past terminatingTimeout
	// (4 s), so all five are due together and the cap decides the order.
	harness.Eventually(t, 10*time.Second, "pre-deleted pods due", func() bool { return time.Now().After(lastDeletion.Add(4500 * time.Millisecond)) })
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	p := startCleanup(t, n, cfg, cleanupKubeconfig(t, cp), "a")

	harness.Eventually(t, 40*time.Second, "every pod removed", func() bool {
		for name := range uids {
			if harness.PodExists(t, cp.Client, "fin", name) {
				return false
			}
		}
		return true
	})
	// Each write: exactly one OPS message and one Event, the verb saying
	// what happened: deletionrequested then forcedeleted for fin-0..2,
	// forcedeleted alone for fin-3 and fin-4.
	want := map[string]string{"fin-0": "deletionrequested,forcedeleted", "fin-1": "deletionrequested,forcedeleted",
		"fin-2": "deletionrequested,forcedeleted", "fin-3": "forcedeleted", "fin-4": "forcedeleted"}
	writes := 3 + total
	harness.Eventually(t, 10*time.Second, "one audit per write", func() bool { return ops.Count(isOutcome) >= writes })
	var times []time.Time
	verbs := map[string][]string{}
	for _, m := range ops.All() {
		if !isOutcome(m) {
			continue
		}
		d := decision(t, m)
		verbs[d.Pod] = append(verbs[d.Pod], d.Verb)
		times = append(times, d.Time)
	}
	for pod, w := range want {
		if got := strings.Join(verbs[pod], ","); got != w {
			t.Fatalf("%s: outcomes %s, want %s:\n%s", pod, got, w, ops.Describe())
		}
	}
	if len(times) != writes {
		t.Fatalf("%d OPS messages, want %d: %s", len(times), writes, ops.Describe())
	}
	wantEvents := map[string]string{"deletionrequested": "CleanupDeletionRequested", "forcedeleted": "CleanupForceDeleted"}
	for name, uid := range uids {
		var evs []string
		for _, v := range strings.Split(want[name], ",") {
			evs = append(evs, wantEvents[v])
		}
		harness.Eventually(t, 5*time.Second, "one Event per write for "+name, func() bool {
			got := cleanupEvents(t, cp, "fin", uid)
			sort.Strings(got)
			return strings.Join(got, ",") == strings.Join(evs, ",")
		})
	}
	// Counted in the process (the stream would hide a repeat with the same id).
	if r, f := p.Metric(decisionsMetric("deletionrequested", "FailedPod")), p.Metric(decisionsMetric("forcedeleted", "StuckTerminating")); r != 3 || f != total {
		t.Fatalf("decisions counted: deletionrequested %v, forcedeleted %v; want 3 and %d", r, f, total)
	}
	if c := strings.Count(p.Logs(), "finalizers cleared; the API server removed the pod"); c != total {
		t.Fatalf("%d removals during the finalizer update logged, want %d (every pod: each was Terminating with grace 0)", c, total)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	const slack = 250 * time.Millisecond
	for i := 0; i+perWindow < len(times); i++ {
		if gap := times[i+perWindow].Sub(times[i]); gap < window-slack {
			t.Fatalf("removals %d and %d only %v apart: more than %d in a %v window", i, i+perWindow, gap, perWindow, window)
		}
	}
	if first := times[perWindow-1].Sub(times[0]); first >= window {
		t.Fatalf("the first %d removals took %v, want within one window", perWindow, first)
	}
	t.Logf("removal times after the first: %v", func() []time.Duration {
		var out []time.Duration
		for _, tm := range times {
			out = append(out, tm.Sub(times[0]).Round(time.Millisecond))
		}
		return out
	}())
}

// TestCleanupDeleteAnswerLost: the API server carries out cleanup's DELETE
// of an evicted pod, but its answer reaches cleanup only after cleanup gave
// up on it (its own 10 s API deadline; the proxy holds the answer until
// cleanup counts the write in doubt, like a slow network or an overloaded
// apiserver). The pod is gone, deleted by cleanup: its audit must say so,
// once. Before, cleanup published failed (critical) and a CleanupFailed
// Event instead, gave the window slot back, and its retry's GET found the
// pod gone and published nothing more: the removal was never audited as
// deleted nor counted (found by review). Everything is counted at the
// source: the publishes on a plain subscription, the process's decisions,
// the Events' counts and the DELETEs at the proxy.
func TestCleanupDeleteAnswerLost(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "slow")
	cfg := harness.WriteConfig(t, cleanupConfig())
	startWatcher(t, cp, n, cfg, "w1")
	p := harness.CreatePod(t, cp.Client, harness.Pod("slow", "ev-0", worker.Name))
	evict(t, cp, p)
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	pubs := countPublishes(t, n, "e2e")
	proxy := harness.StartAPIProxy(t, cp)
	var hold, free sync.Once
	held, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { free.Do(func() { close(release) }) })
	proxy.OnAnswer(func(r harness.APIRequest) {
		if acceptedPodDelete(r) {
			hold.Do(func() { close(held); <-release })
		}
	})
	c := startCleanup(t, n, cfg, proxy.Kubeconfig(t, cleanupKubeconfig(t, cp)), "a")
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("no accepted DELETE within 60 s")
	}
	// Cleanup gave up on the answer: the write counted in doubt (or, as
	// before the fix, reported failed).
	unanswered := `opswire_cleanup_writes_in_doubt_total{how="unanswered"}`
	deleted, failed := "ops.e2e.cleanup.deleted.slow.ev-0", "ops.e2e.cleanup.failed.slow.ev-0"
	harness.Eventually(t, 30*time.Second, "cleanup giving up on the DELETE's answer", func() bool {
		return c.Metric(unanswered) >= 1 || pubs.Counts()[failed] > 0
	})
	free.Do(func() { close(release) })
	harness.Eventually(t, 20*time.Second, "an audit and its Event", func() bool {
		return ops.Count(isOutcome) > 0 && len(cleanupEvents(t, cp, "slow", string(p.UID))) > 0
	})
	got := pubs.Counts()
	evs := cleanupEvents(t, cp, "slow", string(p.UID))
	if got[deleted] != 1 || got[failed] != 0 || c.Metric(decisionsMetric("failed", "FailedPod")) > 0 ||
		c.Metric(decisionsMetric("deleted", "FailedPod")) != 1 || strings.Join(evs, ",") != "CleanupDeleted" {
		t.Fatalf("cleanup deleted slow/ev-0 (the API server carried out its DELETE): want deleted published once, never failed; got publishes %v, Events %v; pod DELETEs sent %v",
			got, evs, podDeletes(proxy, "slow"))
	}
	if d := podDeletes(proxy, "slow"); d["slow/ev-0"] != 1 {
		t.Fatalf("pod DELETEs sent %v, want 1", d)
	}
}

// brakedCluster is six nodes, four of them Unknown, with a watcher and a
// leading cleanup whose mass-failure brake is engaged (its gauge at 1); ops
// collects cleanup's OPS messages.
func brakedCluster(t *testing.T) (*harness.ControlPlane, *harness.Collector, *harness.Process, []string) {
	t.Helper()
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	var nodes []string
	for i := range 6 {
		nodes = append(nodes, harness.CreateNode(t, cp.Client, harness.Node(fmt.Sprintf("node-%d", i), nil)).Name)
	}
	harness.CreateNamespace(t, cp.Client, "apps")
	cfg := harness.WriteConfig(t, cleanupConfig())
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	_, leader := harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", map[string]*harness.Process{"a": startCleanup(t, n, cfg, cleanupKubeconfig(t, cp), "a")})
	for _, name := range nodes[:4] {
		setNodeReady(t, cp, name, corev1.ConditionUnknown)
	}
	harness.Eventually(t, 10*time.Second, "brake engaged (metric)", func() bool {
		return leader.Metric("opswire_cleanup_brake_engaged") == 1
	})
	return cp, ops, leader, nodes
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/test/harness"
)

// The shared write path (shared/actuate, docs/actuate.md) on the cordon actor:
// the dry-run Lease, the audit publisher across a NATS outage and the rate
// window across a leader's death.

// TestCordonDryRunLease: a dry-run replica holds its own Lease
// (opswire-cordon-dryrun) and publishes its simulated decisions, while a real
// replica, started after it, takes the production Lease and cordons.
func TestCordonDryRunLease(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("dl-1", nil))
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	kubeconfig := cordonRBAC(t, cp, "default")

	dry := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: "dry", Args: []string{"--dry-run"}})
	dry.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 10*time.Second, "the dry-run replica leads its own Lease", func() bool {
		return harness.LeaseHolder(c, "default", "opswire-cordon-dryrun") == "dry" && dry.Metric("opswire_leader") == 1
	})
	if holder := harness.LeaseHolder(c, "default", "opswire-cordon"); holder != "" {
		t.Fatalf("the production Lease is held by %q before any real replica runs", holder)
	}
	real := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: "real"})
	real.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 10*time.Second, "the real replica leads the production Lease", func() bool {
		return harness.LeaseHolder(c, "default", "opswire-cordon") == "real" && real.Metric("opswire_leader") == 1
	})

	cordonFill(t, c, "dl-1", 0, 5)
	m := ops.WaitFor(t, 10*time.Second, "dl-1 cordoned", harness.Subject("ops.e2e.cordon.cordoned.dl-1"))
	if d := cordonDecision(t, m); d.Replica != "real" || d.DryRun {
		t.Fatalf("cordon decided by %q (dryRun %v), want the real replica", d.Replica, d.DryRun)
	}
	if node := harness.GetNode(t, c, "dl-1"); !node.Spec.Unschedulable || !cordonMarked(node) {
		t.Fatal("dl-1 not cordoned by the real replica")
	}
	ops.WaitFor(t, 10*time.Second, "the dry-run replica's own decision", func(m harness.Msg) bool {
		return m.Subject == "ops.e2e.cordon.dryrun.dl-1" && cordonDecision(t, m).Replica == "dry"
	})
	// Counted at the source: one real cordon, by the real replica only.
	harness.Eventually(t, 10*time.Second, "the cordon Event", func() bool { return cordonEventCount(t, c, "dl-1", "OpswireCordoned") == 1 })
	if v := real.Metric(`opswire_cordon_cordons_total{dry_run="false",mode="cordon"}`); v != 1 {
		t.Fatalf("real replica cordons = %v", v)
	}
	if v := dry.Metric(`opswire_cordon_cordons_total{dry_run="false",mode="cordon"}`); v > 0 {
		t.Fatalf("dry-run replica cordons = %v", v)
	}
	if harness.LeaseHolder(c, "default", "opswire-cordon-dryrun") != "dry" || dry.Exited() {
		t.Fatal("the dry-run replica lost its Lease")
	}
}

// TestCordonNATSOutage: NATS goes away for longer than half the streams'
// duplicate window while the actor still has nodes over maxPods to act on
// (the rate window spaces them 1 s apart). Every node is cordoned during the
// outage, one action not waiting for the previous one's audit; every OPS
// message is stored, once, after NATS is back.
func TestCordonNATSOutage(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	const nodes = 4
	for i := range nodes {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("out-%d", i), nil))
	}
	const dedup = 10 * time.Second
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n  maxActionsPerMinute: 1\n  rateWindow: 1s\n")+
		// A short duplicate window (the report's catch-up needs a long one).
		"nats:\n  duplicates: 10s\nsendReport:\n  enable: false\n")
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	for i := range nodes {
		cordonFill(t, c, fmt.Sprintf("out-%d", i), 0, 5)
	}
	harness.Eventually(t, 10*time.Second, "every node at 5 pods in KUBE", func() bool {
		for i := range nodes {
			if s := lastNode(t, n.JS, fmt.Sprintf("kube.e2e.node.out-%d", i)); s == nil || s.Pods != 5 {
				return false
			}
		}
		return true
	})
	first := ops.WaitFor(t, 10*time.Second, "the first cordon in OPS", func(m harness.Msg) bool {
		return strings.HasPrefix(m.Subject, "ops.e2e.cordon.cordoned.")
	})

	n.Stop()
	down := time.Now()
	t.Logf("NATS stopped after %s", first.Subject)
	// With an actuator that waited for each audit (up to half the duplicate
	// window, 5 s), the other three would take about 15 s; they take 3 s.
	harness.Eventually(t, dedup/2+time.Second, "every node cordoned while NATS is down", func() bool {
		return cordonCountMarked(t, c) == nodes
	})
	t.Logf("all %d nodes cordoned %v into the outage", nodes, time.Since(down).Round(time.Millisecond))
	// The last node's audit is queued just after its mark shows (the patch's
	// answer, its log line and Event come first): poll for it.
	harness.Eventually(t, 5*time.Second, fmt.Sprintf("an audit backlog of at least %d during the outage", nodes-1), func() bool {
		return cordon.Metric("opswire_audit_backlog") >= nodes-1
	})
	// Keep NATS away for longer than half the duplicate window (where the
	// old actuator abandoned an audit): nothing is given up.
	harness.Never(t, dedup/2+time.Second-time.Since(down), "an audit message dropped", func() bool {
		return cordon.Metric("opswire_audit_dropped_total") != 0
	})
	t.Logf("NATS back after %v", time.Since(down).Round(time.Millisecond))
	n.Restart(t)

	after := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	harness.Eventually(t, 30*time.Second, "the backlog stored", func() bool {
		return cordon.Metric("opswire_audit_backlog") == 0 && after.Count(func(m harness.Msg) bool {
			return strings.HasPrefix(m.Subject, "ops.e2e.cordon.cordoned.")
		}) == nodes
	})
	for i := range nodes {
		subj := fmt.Sprintf("ops.e2e.cordon.cordoned.out-%d", i)
		if got := after.Count(harness.Subject(subj)); got != 1 {
			t.Fatalf("%s stored %d times:%s", subj, got, after.Describe())
		}
	}
	// At the source: one acknowledged publish per decision (a repeat would
	// count here even where the stream dropped it as a duplicate), one
	// write per node.
	if got := after.Count(isCordonOutcome); got != nodes {
		t.Fatalf("%d OPS decisions, want %d:%s", got, nodes, after.Describe())
	}
	// Each cordon was journaled or, with NATS away, written unjournaled
	// after the intent's 1 s bound.
	journaled, unjournaled := cordon.Metric(`opswire_intents_total{result="journaled"}`), cordon.Metric(`opswire_intents_total{result="unjournaled"}`)
	t.Logf("intents: %v journaled, %v unjournaled", journaled, unjournaled)
	if journaled+unjournaled != nodes || unjournaled < 1 {
		t.Fatalf("intents: %v journaled, %v unjournaled; want %d in all, the outage's unjournaled", journaled, unjournaled, nodes)
	}
	if v := cordon.Metric("opswire_audit_stored_total"); v != nodes {
		t.Fatalf("audit publishes acknowledged = %v, want %d", v, nodes)
	}
	if v := cordon.Metric(`opswire_cordon_cordons_total{dry_run="false",mode="cordon"}`); v != nodes {
		t.Fatalf("cordons = %v, want %d", v, nodes)
	}
	if v := cordon.Metric("opswire_audit_dropped_total"); v != 0 {
		t.Fatalf("dropped = %v", v)
	}
}

// TestCordonRateLimitFailover: two actions per 12 s window, five nodes over
// maxPods. The first leader cordons two and is SIGKILLed; the new leader reads
// them back from OPS and cordons more only when they leave the window, not at
// once (a fresh limiter would have allowed two more right away).
func TestCordonRateLimitFailover(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	const nodes, perWindow, window = 5, 2, 12 * time.Second
	for i := range nodes {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("rl-%d", i), nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", fmt.Sprintf("  maxCordonedPercent: 100\n  maxActionsPerMinute: %d\n  rateWindow: %v\n", perWindow, window)))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	kubeconfig := cordonRBAC(t, cp, "default")
	replicas := map[string]*harness.Process{}
	for _, id := range []string{"r1", "r2"} {
		replicas[id] = harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: id})
	}
	for _, p := range replicas {
		p.WaitReady(t, 60*time.Second)
	}
	var first string
	harness.Eventually(t, 10*time.Second, "a leader", func() bool {
		first = harness.LeaseHolder(c, "default", "opswire-cordon")
		return replicas[first] != nil && replicas[first].Metric("opswire_leader") == 1
	})
	for i := range nodes {
		cordonFill(t, c, fmt.Sprintf("rl-%d", i), 0, 5)
	}
	isCordon := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cordon.cordoned.") }
	harness.Eventually(t, 15*time.Second, "the first leader's two cordons in OPS", func() bool { return ops.Count(isCordon) == perWindow })
	// The window frees its first slot perWindow after the first action's
	// intent was stored (the time the new leader reads from OPS; the intent
	// comes before the patch and its outcome).
	isIntent := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cordon.intent.") }
	firstStored := opsStoredTime(t, n, ops.WaitFor(t, time.Second, "first cordon's intent", isIntent).Seq)
	replicas[first].Kill()
	killed := time.Now()
	second := "r1"
	if first == "r1" {
		second = "r2"
	}
	harness.Eventually(t, 15*time.Second, "the new leader seeded its window", func() bool {
		return replicas[second].Metric("opswire_rate_window_seeded_actions") == perWindow
	})
	t.Logf("new leader %s seeded its window %v after the SIGKILL; first slot frees at +%v",
		second, time.Since(killed).Round(time.Millisecond), time.Until(firstStored.Add(window)).Round(time.Millisecond))
	// Until then: nothing beyond the two (a margin of 1 s for the clocks).
	harness.Never(t, time.Until(firstStored.Add(window-time.Second)), "a third cordon within the window", func() bool {
		return cordonCountMarked(t, c) > perWindow
	})
	// The first leader's two actions leave the window together, so the new
	// leader may take both slots at once, never more.
	harness.Eventually(t, 10*time.Second, "the next cordons once the window moved", func() bool {
		return cordonCountMarked(t, c) > perWindow
	})
	if held := cordonCountMarked(t, c); held > 2*perWindow {
		t.Fatalf("%d nodes cordoned, more than %d per window twice", held, perWindow)
	}
	third := ops.WaitFor(t, 5*time.Second, "the third cordon in OPS", func(m harness.Msg) bool {
		return isCordon(m) && cordonDecision(t, m).Replica == second
	})
	if at := opsStoredTime(t, n, third.Seq); at.Before(firstStored.Add(window)) {
		t.Fatalf("third cordon stored %v after the first, inside the %v window", at.Sub(firstStored), window)
	}
	if v := replicas[second].Metric(`opswire_cordon_cordons_total{dry_run="false",mode="cordon"}`); v < 1 || v > perWindow {
		t.Fatalf("the new leader cordoned %v nodes in its first window", v)
	}
}

// cordonCountMarked counts the nodes carrying opswire's mark in the API.
func cordonCountMarked(t *testing.T, c kubernetes.Interface) int {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for i := range list.Items {
		if cordonMarked(&list.Items[i]) {
			held++
		}
	}
	return held
}

// opsStoredTime is the time OPS stored the message with sequence seq.
func opsStoredTime(t *testing.T, n *harness.NATS, seq uint64) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.JS.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Fatal(err)
	}
	return m.Time
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// cordonConfig is a small-numbers version of the seed's autoCordon section.
// The interval is long on purpose where the event-driven path is under test.
func cordonConfig(interval string, extra string) string {
	return `
cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 100ms
autoCordon:
  enable: true
  interval: ` + interval + `
  maxPods: 5
  minPods: 2
` + extra
}

// TestCordonHysteresisAndOwnership: node A is cordoned at maxPods and released
// at minPods, nothing happens between the bounds, and nodes a person cordoned
// or labelled donotcordon are never touched. cordon runs as a least-privilege
// ServiceAccount.
func TestCordonHysteresisAndOwnership(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	ctx := context.Background()
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("node-a.example", nil))
	b := harness.CreateNode(t, c, harness.Node("node-b", nil))
	b.Spec.Unschedulable = true
	if _, err := c.CoreV1().Nodes().Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.CreateNode(t, c, harness.Node("node-c", map[string]string{events.LabelDoNotCordon: ""}))

	cfg := harness.WriteConfig(t, cordonConfig("1m", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cordonRBAC(t, cp, "default"), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)

	// B and C go over maxPods first; the worker handles them before A.
	cordonFill(t, c, "node-b", 0, 7)
	cordonFill(t, c, "node-c", 0, 7)
	harness.Eventually(t, 10*time.Second, "B and C at 7 pods in KUBE", func() bool {
		sb, sc := lastNode(t, n.JS, "kube.e2e.node.node-b"), lastNode(t, n.JS, "kube.e2e.node.node-c")
		return sb != nil && sc != nil && sb.Pods == 7 && sc.Pods == 7
	})

	// A: 4 pods is between the bounds (unmarked: nothing); the 5th cordons.
	before := cordonReconciles(cordon)
	cordonFill(t, c, "node-a.example", 0, 4)
	harness.Eventually(t, 10*time.Second, "A at 4 pods in KUBE", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.node-a_example")
		return s != nil && s.Pods == 4
	})
	cordonWaitReconciled(t, cordon, before, 1)
	if a := harness.GetNode(t, c, "node-a.example"); a.Spec.Unschedulable || cordonMarked(a) {
		t.Fatal("A cordoned below maxPods")
	}
	cordonFill(t, c, "node-a.example", 4, 1)
	created := time.Now()
	harness.Eventually(t, 2*time.Second, "A cordoned and marked within 2 s of its 5th pod", func() bool {
		a := harness.GetNode(t, c, "node-a.example")
		return a.Spec.Unschedulable && cordonMarked(a) && a.Annotations[events.AnnotationAutoCordon] != ""
	})
	t.Logf("node A cordoned %v after its 5th pod was created", time.Since(created).Round(time.Millisecond))

	// Down to 3 (between the bounds): A stays cordoned.
	before = cordonReconciles(cordon)
	cordonDrain(t, c, "node-a.example", 3, 5)
	harness.Eventually(t, 10*time.Second, "A at 3 pods in KUBE", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.node-a_example")
		return s != nil && s.Pods == 3
	})
	cordonWaitReconciled(t, cordon, before, 1)
	if a := harness.GetNode(t, c, "node-a.example"); !a.Spec.Unschedulable || !cordonMarked(a) {
		t.Fatal("A released between the bounds")
	}
	// Down to minPods: released and unmarked.
	cordonDrain(t, c, "node-a.example", 2, 3)
	harness.Eventually(t, 5*time.Second, "A uncordoned and unmarked at minPods", func() bool {
		a := harness.GetNode(t, c, "node-a.example")
		_, annotated := a.Annotations[events.AnnotationAutoCordon]
		return !a.Spec.Unschedulable && !cordonMarked(a) && !annotated
	})

	// B (a person's cordon) and C (donotcordon) at 7 pods, then at 0: untouched.
	before = cordonReconciles(cordon)
	cordonDrain(t, c, "node-b", 0, 7)
	cordonDrain(t, c, "node-c", 0, 7)
	harness.Eventually(t, 10*time.Second, "B and C empty in KUBE", func() bool {
		sb, sc := lastNode(t, n.JS, "kube.e2e.node.node-b"), lastNode(t, n.JS, "kube.e2e.node.node-c")
		return sb != nil && sc != nil && sb.Pods == 0 && sc.Pods == 0
	})
	cordonWaitReconciled(t, cordon, before, 2)
	if nb := harness.GetNode(t, c, "node-b"); !nb.Spec.Unschedulable || cordonMarked(nb) {
		t.Fatalf("B touched: unschedulable=%v labels=%v", nb.Spec.Unschedulable, nb.Labels)
	}
	if nc := harness.GetNode(t, c, "node-c"); nc.Spec.Unschedulable || cordonMarked(nc) {
		t.Fatalf("C touched: unschedulable=%v labels=%v", nc.Spec.Unschedulable, nc.Labels)
	}

	// The audit trail: exactly one cordon and one uncordon of A, nothing for B or C.
	harness.Eventually(t, 5*time.Second, "A's uncordon in OPS", func() bool {
		return len(cordonMsgs(t, ops, "e2e", "node-a.example", "uncordoned")) == 1
	})
	all := cordonMsgs(t, ops, "e2e", "node-a.example", "")
	if len(all) != 2 || all[0].Verb != "cordoned" || all[1].Verb != "uncordoned" {
		t.Fatalf("A's decisions: %+v", all)
	}
	if d := all[0]; d.Pods != 5 || d.MaxPods != 5 || d.MinPods != 2 || d.Reason == "" || d.NodeUID == "" || d.Replica != "c1" {
		t.Fatalf("cordon decision lacks its numbers: %+v", d)
	}
	if d := all[1]; d.Pods != 2 {
		t.Fatalf("uncordon decision: %+v", d)
	}
	for _, node := range []string{"node-b", "node-c"} {
		if got := cordonMsgs(t, ops, "e2e", node, ""); len(got) != 0 {
			t.Fatalf("decisions published for %s: %+v", node, got)
		}
	}
	if ops.Count(func(m harness.Msg) bool { return m.Subject == "ops.e2e.cordon.cordoned.node-a_example" }) != 1 {
		t.Fatal("cordon not published on ops.<cluster>.cordon.cordoned.<node> with the node name encoded")
	}
	// Exactly once, counted at the source: the stream drops a repeated id
	// for its whole duplicate window, so OPS alone cannot show a repeat.
	harness.Eventually(t, 10*time.Second, "Events on node A", func() bool {
		return cordonEventCount(t, c, "node-a.example", "OpswireCordoned") == 1 &&
			cordonEventCount(t, c, "node-a.example", "OpswireUncordoned") == 1
	})
	if v := cordon.Metric(`opswire_cordon_cordons_total{dry_run="false",mode="cordon"}`); v != 1 {
		t.Fatalf("cordons metric = %v", v)
	}
	if v := cordon.Metric(`opswire_cordon_uncordons_total{dry_run="false"}`); v != 1 {
		t.Fatalf("uncordons metric = %v", v)
	}
	if v := cordon.Metric("opswire_audit_stored_total"); v != 2 {
		t.Fatalf("audit publishes acknowledged = %v, want 2 (one cordon, one uncordon)", v)
	}
}

// TestCordonBlastRadiusCap: ten nodes over maxPods with the default cap (20 %
// of managed nodes) → exactly two cordoned, eight refusals published once
// each, even across several reconcile ticks.
func TestCordonBlastRadiusCap(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	const nodes = 10
	for i := range nodes {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("cap-%d", i), nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", ""))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	for i := range nodes {
		cordonFill(t, c, fmt.Sprintf("cap-%d", i), 0, 5)
	}
	isVerb := func(v string) func(harness.Msg) bool {
		return func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cordon."+v+".") }
	}
	harness.Eventually(t, 15*time.Second, "ten decisions", func() bool {
		return ops.Count(isVerb("cordoned"))+ops.Count(isVerb("skipped")) >= nodes
	})
	// Several ticks later the picture is unchanged and nothing was repeated.
	cordonWaitReconciled(t, cordon, cordonReconciles(cordon), 3*nodes)
	if got, want := ops.Count(isVerb("cordoned")), 2; got != want {
		t.Fatalf("%d cordoned, want %d; OPS holds:%s", got, want, ops.Describe())
	}
	if got := ops.Count(isVerb("skipped")); got != nodes-2 {
		t.Fatalf("%d refusals published, want %d (once per node); OPS holds:%s", got, nodes-2, ops.Describe())
	}
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, node := range list.Items {
		if cordonMarked(&node) && node.Spec.Unschedulable {
			held++
		}
	}
	if held != 2 {
		t.Fatalf("%d nodes cordoned in the API, want 2", held)
	}
	refusal := cordonDecision(t, ops.WaitFor(t, time.Second, "a refusal", isVerb("skipped")))
	if refusal.Code != "cap-reached" || refusal.Held != 2 || refusal.Cap != 2 || refusal.Managed != nodes ||
		!strings.Contains(refusal.Reason, "maxCordonedPercent") || refusal.Pods != 5 {
		t.Fatalf("refusal lacks its reason: %+v", refusal)
	}
	harness.Eventually(t, 10*time.Second, "refusal Events", func() bool {
		return cordonEventCount(t, c, refusal.Node, "OpswireCordonRefused") == 1
	})
	if v := cordon.Metric("opswire_cordon_nodes_cordoned"); v != 2 {
		t.Fatalf("nodes_cordoned gauge = %v", v)
	}
	// At the source (OPS would hide a repeated id): two writes, ten publishes.
	if v := cordon.Metric(`opswire_cordon_cordons_total{dry_run="false",mode="cordon"}`); v != 2 {
		t.Fatalf("cordons metric = %v", v)
	}
	if v := cordon.Metric("opswire_audit_stored_total"); v != nodes {
		t.Fatalf("audit publishes acknowledged = %v, want %d", v, nodes)
	}
}

// TestCordonDryRun: --dry-run changes no node and writes no Event, but the
// decision is still published.
func TestCordonDryRun(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("dry", nil))
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "c1", Args: []string{"--dry-run"}})
	cordon.WaitReady(t, 60*time.Second)
	before := harness.GetNode(t, c, "dry")
	cordonFill(t, c, "dry", 0, 6)
	m := ops.WaitFor(t, 10*time.Second, "dry-run cordon decision", harness.Subject("ops.e2e.cordon.dryrun.dry"))
	if d := cordonDecision(t, m); !d.DryRun || d.Action != "cordon" || d.Pods < 5 || d.MaxPods != 5 {
		t.Fatalf("dry-run decision %+v", d)
	}
	// The simulated mark keeps hysteresis: draining to minPods is a dry-run uncordon.
	cordonDrain(t, c, "dry", 2, 6)
	harness.Eventually(t, 10*time.Second, "dry-run uncordon decision", func() bool {
		ds := cordonMsgs(t, ops, "e2e", "dry", "dryrun")
		return len(ds) == 2 && ds[1].Action == "uncordon"
	})
	cordonWaitReconciled(t, cordon, cordonReconciles(cordon), 3)
	after := harness.GetNode(t, c, "dry")
	if after.ResourceVersion != before.ResourceVersion || after.Spec.Unschedulable || cordonMarked(after) {
		t.Fatalf("dry run changed the node (rv %s → %s)", before.ResourceVersion, after.ResourceVersion)
	}
	for _, reason := range []string{"OpswireCordoned", "OpswireUncordoned"} {
		if evs := cordonEvents(t, c, "dry", reason); len(evs) != 0 {
			t.Fatalf("dry run recorded Events: %+v", evs)
		}
	}
	if got := len(cordonMsgs(t, ops, "e2e", "dry", "")); got != 2 {
		t.Fatalf("%d decisions, want 2 (no repeats on ticks)", got)
	}
	if v := cordon.Metric("opswire_audit_stored_total"); v != 2 {
		t.Fatalf("audit publishes acknowledged = %v, want 2 (a repeat with the same id would hide in OPS)", v)
	}
}

// TestCordonFailover: three replicas; the leader is SIGKILLed, another takes
// over within the lease duration and keeps the rules; no node is patched by
// two replicas; SIGTERM releases the lease at once.
func TestCordonFailover(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	for _, name := range []string{"f-1", "f-2", "f-3"} {
		harness.CreateNode(t, c, harness.Node(name, nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	kubeconfig := cordonRBAC(t, cp, "default")
	replicas := map[string]*harness.Process{}
	for _, id := range []string{"r1", "r2", "r3"} {
		replicas[id] = harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: id})
	}
	for _, p := range replicas {
		p.WaitReady(t, 60*time.Second) // standbys are ready too
	}
	const lease = "opswire-cordon"
	var first string
	harness.Eventually(t, 10*time.Second, "a leader", func() bool { first = harness.LeaseHolder(c, "default", lease); return first != "" })

	cordonFill(t, c, "f-1", 0, 5)
	ops.WaitFor(t, 5*time.Second, "f-1 cordoned by the first leader", harness.Subject("ops.e2e.cordon.cordoned.f-1"))
	// Events are sent asynchronously; let the first leader's reach the API
	// before it is killed, so the count below tests duplicates, not timing.
	harness.Eventually(t, 10*time.Second, "f-1 cordon Event", func() bool {
		return len(cordonEvents(t, c, "f-1", "OpswireCordoned")) > 0
	})

	replicas[first].Kill()
	killed := time.Now()
	var second string
	harness.Eventually(t, 10*time.Second, "a new leader", func() bool {
		second = harness.LeaseHolder(c, "default", lease)
		return second != "" && second != first
	})
	takeover := time.Since(killed)
	// A killed leader cannot release its lease: a standby may take it only
	// once leaseDuration has passed since it last saw a renewal, and it
	// looks every retryPeriod with client-go's jitter (up to 2.2x). The bound
	// is therefore leaseDuration + two jittered retry periods.
	const leaseDuration, retryPeriod = 3 * time.Second, 100 * time.Millisecond
	t.Logf("takeover after SIGKILL: %v (leaseDuration %v, retryPeriod %v)", takeover.Round(time.Millisecond), leaseDuration, retryPeriod)
	if limit := leaseDuration + 2*22*retryPeriod/10; takeover > limit {
		t.Fatalf("takeover took %v, more than the lease duration + two jittered retry periods (%v)", takeover, limit)
	}

	// The new leader keeps the rules: cordons f-2, releases f-1, leaves f-3 (below max).
	cordonFill(t, c, "f-2", 0, 6)
	cordonFill(t, c, "f-3", 0, 4)
	cordonDrain(t, c, "f-1", 1, 5)
	ops.WaitFor(t, 10*time.Second, "f-2 cordoned by the new leader", harness.Subject("ops.e2e.cordon.cordoned.f-2"))
	ops.WaitFor(t, 10*time.Second, "f-1 released by the new leader", harness.Subject("ops.e2e.cordon.uncordoned.f-1"))
	harness.Eventually(t, 10*time.Second, "f-2 cordon Event", func() bool {
		return len(cordonEvents(t, c, "f-2", "OpswireCordoned")) > 0
	})

	// SIGTERM: the lease is released at once (no wait for expiry).
	if code := replicas[second].Stop(); code != 0 {
		t.Fatalf("SIGTERM exit code %d", code)
	}
	stopped := time.Now()
	var third string
	harness.Eventually(t, 3*time.Second, "the last replica leads", func() bool {
		third = harness.LeaseHolder(c, "default", lease)
		return third != "" && third != first && third != second
	})
	handover := time.Since(stopped)
	t.Logf("handover after SIGTERM: %v", handover.Round(time.Millisecond))
	if handover >= leaseDuration {
		t.Fatalf("handover after SIGTERM took %v: the lease was not released", handover)
	}
	cordonDrain(t, c, "f-2", 0, 6)
	ops.WaitFor(t, 10*time.Second, "f-2 released by the third leader", harness.Subject("ops.e2e.cordon.uncordoned.f-2"))

	// No node was patched twice for one decision, and each action came from
	// the replica that led at the time.
	seen := map[string]string{}
	var decisions []harness.Msg
	for _, m := range ops.All() {
		if isCordonOutcome(m) {
			decisions = append(decisions, m)
		}
	}
	for _, m := range decisions {
		d := cordonDecision(t, m)
		key := d.Node + "/" + d.Verb + "/" + d.ResourceVersion
		if prev, dup := seen[key]; dup {
			t.Fatalf("%s decided twice (by %s and %s)", key, prev, d.Replica)
		}
		seen[key] = d.Replica
	}
	wantBy := map[string]string{"f-1/cordoned": first, "f-2/cordoned": second, "f-1/uncordoned": second, "f-2/uncordoned": third}
	for _, m := range decisions {
		d := cordonDecision(t, m)
		if want, ok := wantBy[d.Node+"/"+d.Verb]; ok && d.Replica != want {
			t.Fatalf("%s %s by %s, want %s", d.Node, d.Verb, d.Replica, want)
		}
	}
	if got := len(decisions); got != 4 {
		t.Fatalf("%d decisions, want 4: %v", got, decisions)
	}
	// Counted at the source: one cordon Event per node across all leaders
	// (the killed leader's metrics are gone with it).
	for _, node := range []string{"f-1", "f-2"} {
		if got := cordonEventCount(t, c, node, "OpswireCordoned"); got != 1 {
			t.Fatalf("%s: %d cordon Events", node, got)
		}
	}
	if a := harness.GetNode(t, c, "f-3"); a.Spec.Unschedulable || cordonMarked(a) {
		t.Fatal("f-3 touched below maxPods")
	}
}

// TestCordonSeedConfig runs watcher and cordon on the seed's config.yml,
// byte for byte: five nodes, one reaches the seed's maxPods (100) and is
// cordoned (the default cap, 20 % of 5, allows exactly one), then released at
// minPods (90).
func TestCordonSeedConfig(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(root, "shared", "config", "testdata", "seed.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	for i := range 5 {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("seed-%d", i), nil))
	}
	cfg := harness.WriteConfig(t, string(seed))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.default.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	cordonFill(t, c, "seed-0", 0, 100)
	ops.WaitFor(t, 10*time.Second, "seed-0 cordoned at 100 pods", harness.Subject("ops.default.cordon.cordoned.seed-0"))
	if holder := harness.LeaseHolder(c, "kube-system", "ops-resource-controller-cordon"); holder != "c1" {
		t.Fatalf("seed lease holder %q", holder)
	}
	cordonDrain(t, c, "seed-0", 90, 100)
	ops.WaitFor(t, 10*time.Second, "seed-0 released at 90 pods", harness.Subject("ops.default.cordon.uncordoned.seed-0"))
	if a := harness.GetNode(t, c, "seed-0"); a.Spec.Unschedulable || cordonMarked(a) {
		t.Fatal("seed-0 not released")
	}
}

// TestCordonTaintMode: in taint mode opswire adds its NoSchedule taint next
// to a placement taint listed in ignoreTaintKeys (without it, the seed's
// rule would leave the tainted node alone), and on release removes only its own.
func TestCordonTaintMode(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	node := harness.CreateNode(t, c, harness.Node("tainted", nil))
	node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := c.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  mode: taint\n  taintKey: example.com/busy\n  maxCordonedPercent: 100\n  ignoreTaintKeys: [dedicated]\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)

	cordonFill(t, c, "tainted", 0, 5)
	m := ops.WaitFor(t, 5*time.Second, "taint decision", harness.Subject("ops.e2e.cordon.cordoned.tainted"))
	if d := cordonDecision(t, m); d.Mode != "taint" {
		t.Fatalf("decision %+v", d)
	}
	got := harness.GetNode(t, c, "tainted")
	if got.Spec.Unschedulable || !cordonMarked(got) || len(got.Spec.Taints) != 2 ||
		got.Spec.Taints[0].Key != "dedicated" || got.Spec.Taints[1].Key != "example.com/busy" ||
		got.Spec.Taints[1].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("after taint: unschedulable=%v taints=%+v labels=%v", got.Spec.Unschedulable, got.Spec.Taints, got.Labels)
	}
	cordonDrain(t, c, "tainted", 2, 5)
	ops.WaitFor(t, 5*time.Second, "release decision", harness.Subject("ops.e2e.cordon.uncordoned.tainted"))
	got = harness.GetNode(t, c, "tainted")
	if cordonMarked(got) || len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "dedicated" {
		t.Fatalf("after release: taints=%+v labels=%v", got.Spec.Taints, got.Labels)
	}
}

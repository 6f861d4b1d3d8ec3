package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCordonCapHoldsWithStaleMirror: cap 2, ten nodes at maxPods. The watcher
// is stopped (SIGSTOP) before the first leader cordons, so KUBE never shows
// opswire's marks; the leader is SIGKILLed. The new leader must learn the
// marks from the API: after takeover and 15 s, at most 2 nodes carry the mark.
func TestCordonCapHoldsWithStaleMirror(t *testing.T) { cordonStaleFailover(t, 0) }

// TestCordonCapCountsPersonCordonsWithStaleMirror: the same, with a third of
// the nodes cordoned by a person after the watcher stopped (KUBE never shows
// those cordons either). They already take the cap's 2 nodes and more, so
// opswire adds none, before or after the failover.
func TestCordonCapCountsPersonCordonsWithStaleMirror(t *testing.T) { cordonStaleFailover(t, 3) }

func cordonStaleFailover(t *testing.T, personCordoned int) {
	const nodes, capNodes = 10, 2
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("stale-%d", i)
		harness.CreateNode(t, c, harness.Node(names[i], nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", fmt.Sprintf("  maxCordonedNodes: %d\n  maxCordonedPercent: 100\n", capNodes)))
	watcher := startWatcher(t, cp, n, cfg, "w1")
	for _, name := range names {
		cordonFill(t, c, name, 0, 5)
	}
	harness.Eventually(t, 20*time.Second, "KUBE counts maxPods on every node", func() bool {
		for _, name := range names {
			if s := lastNode(t, n.JS, "kube.e2e.node."+name); s == nil || s.Pods != 5 {
				return false
			}
		}
		return true
	})
	sigstop(t, watcher)
	for _, name := range names[:personCordoned] {
		setUnschedulable(t, c, name, true)
	}

	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	kubeconfig := cordonRBAC(t, cp, "default")
	r1 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: "r1"})
	r1.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 10*time.Second, "r1 leads", func() bool { return harness.LeaseHolder(c, "default", "opswire-cordon") == "r1" })
	want := max(0, capNodes-personCordoned)
	harness.Eventually(t, 15*time.Second, fmt.Sprintf("r1 holds %d node(s)", want), func() bool { return cordonCountMarks(t, c) == want })
	cordonWaitReconciled(t, r1, 0, 2*nodes) // every node evaluated, twice

	r2 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: "r2"})
	r2.WaitReady(t, 60*time.Second)
	r1.Kill()
	harness.Eventually(t, 10*time.Second, "r2 takes over", func() bool { return harness.LeaseHolder(c, "default", "opswire-cordon") == "r2" })
	if s := lastNode(t, n.JS, "kube.e2e.node."+names[nodes-1]); s == nil || s.Unschedulable || s.Labels[events.LabelAutoCordon] != "" {
		t.Fatal("KUBE is not stale: the test would prove nothing")
	}
	before := cordonReconciles(r2)
	harness.Never(t, 15*time.Second, fmt.Sprintf("more than %d node(s) marked by opswire", want), func() bool { return cordonCountMarks(t, c) > want })
	if got := cordonReconciles(r2) - before; got < 2*nodes {
		t.Fatalf("r2 ran %v reconciliations in 15 s: it did not look at the nodes", got)
	}
	if got := cordonCountMarks(t, c); got != want {
		t.Fatalf("%d nodes marked, want %d", got, want)
	}
	for _, name := range names[:personCordoned] {
		if nd := harness.GetNode(t, c, name); !nd.Spec.Unschedulable || cordonMarked(nd) {
			t.Fatalf("%s, cordoned by a person, was touched", name)
		}
	}
	if got := len(cordonVerbs(t, ops, "cordoned")); got != want {
		t.Fatalf("%d cordons published, want %d; OPS holds:%s", got, want, ops.Describe())
	}
	if r2.Metric(`opswire_cordon_refusals_total{reason="cap-reached"}`) == 0 {
		t.Fatal("r2 never refused a cordon: the cap was not what held")
	}
}

// TestCordonCapCountsNotReadyNodes: capacity already out of service counts
// toward the cap by default. With maxCordonedNodes 1 and one node NotReady,
// a node at maxPods is refused; once that node is Ready again, it is cordoned.
func TestCordonCapCountsNotReadyNodes(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	for i := range 4 {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("nr-%d", i), nil))
	}
	setReady := func(name string, status corev1.ConditionStatus) {
		harness.SetNodeStatus(t, c, name, func(s *corev1.NodeStatus) {
			s.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "Test",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		})
	}
	setReady("nr-0", corev1.ConditionUnknown) // the node lifecycle controller's verdict on a lost kubelet
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedNodes: 1\n  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	harness.Eventually(t, 10*time.Second, "KUBE shows nr-0 NotReady", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.nr-0")
		return s != nil && s.Ready == "Unknown"
	})
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg,
		Kubeconfig: proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)

	cordonFill(t, c, "nr-1", 0, 5)
	m := ops.WaitFor(t, 10*time.Second, "nr-1 refused", harness.Subject("ops.e2e.cordon.skipped.nr-1"))
	if d := cordonDecision(t, m); d.Code != "cap-reached" || d.Held != 1 || d.Cap != 1 || !strings.Contains(d.Reason, "out of service") {
		t.Fatalf("refusal %+v", d)
	}
	// Held for several ticks (500 ms): no mark, and no node write at all.
	harness.Never(t, 3*time.Second, "a node marked or patched beyond the cap", func() bool {
		return cordonMarks(c) != 0 || proxy.Count(func(r harness.APIRequest) bool { _, ok := acceptedNodePatch(r); return ok }) != 0
	})
	setReady("nr-0", corev1.ConditionTrue)
	ops.WaitFor(t, 10*time.Second, "nr-1 cordoned once nr-0 is back", harness.Subject("ops.e2e.cordon.cordoned.nr-1"))
	// The cordon read nr-1 from the cap's LIST of every node (watch cache,
	// NotOlderThan), not with a GET of its own, and patched it once.
	if got := proxy.Count(func(r harness.APIRequest) bool { return r.Method == http.MethodGet && r.Path == "/api/v1/nodes/nr-1" }); got != 0 {
		t.Fatalf("%d GETs of nr-1: a new cordon reads the node from the cap's LIST", got)
	}
	if got := nodePatches(proxy, "nr-1"); got != 1 {
		t.Fatalf("%d accepted patches of nr-1, want 1", got)
	}
	lists := proxy.Requests(func(r harness.APIRequest) bool {
		return r.Method == http.MethodGet && r.Path == "/api/v1/nodes" && r.Query.Get("watch") == "" &&
			r.Query.Get("resourceVersionMatch") == "NotOlderThan" && r.Query.Get("resourceVersion") != ""
	})
	if len(lists) == 0 {
		t.Fatal("no node LIST from the watch cache: the cap was not counted from the API")
	}
}

// TestCordonLeavesPersonTaintedNodeAlone is the seed's taint rule: a node a
// person tainted (maintenance=true:NoSchedule), without opswire's label, is
// left alone at maxPods: no label, no cordon, no taint. A taint Kubernetes
// itself manages (node.kubernetes.io/*) is not a person's: that node is cordoned.
func TestCordonLeavesPersonTaintedNodeAlone(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	maint := corev1.Taint{Key: "maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	kubes := corev1.Taint{Key: "node.kubernetes.io/memory-pressure", Effect: corev1.TaintEffectNoSchedule}
	setTaints(t, c, harness.CreateNode(t, c, harness.Node("maint", nil)).Name, maint)
	setTaints(t, c, harness.CreateNode(t, c, harness.Node("kubes", nil)).Name, kubes)
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cordonRBAC(t, cp, "default"), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	before := harness.GetNode(t, c, "maint")

	cordonFill(t, c, "maint", 0, 6)
	cordonFill(t, c, "kubes", 0, 6)
	ops.WaitFor(t, 10*time.Second, "kubes cordoned", harness.Subject("ops.e2e.cordon.cordoned.kubes"))
	cordonWaitReconciled(t, cordon, cordonReconciles(cordon), 6) // several ticks over both nodes
	after := harness.GetNode(t, c, "maint")
	if after.ResourceVersion != before.ResourceVersion || after.Spec.Unschedulable || cordonMarked(after) ||
		len(after.Spec.Taints) != 1 || after.Spec.Taints[0].Key != "maintenance" {
		t.Fatalf("maint touched: rv %s → %s, unschedulable=%v, labels=%v, taints=%+v",
			before.ResourceVersion, after.ResourceVersion, after.Spec.Unschedulable, after.Labels, after.Spec.Taints)
	}
	if got := cordonMsgs(t, ops, "e2e", "maint", ""); len(got) != 0 {
		t.Fatalf("decisions published for maint: %+v", got)
	}
	if k := harness.GetNode(t, c, "kubes"); !k.Spec.Unschedulable || !cordonMarked(k) {
		t.Fatal("kubes (a Kubernetes-managed taint only) not cordoned")
	}
}

// TestCordonSeedConfigSmallCluster: the seed's config.yml with its thresholds
// scaled down (maxPods 5, minPods 3) on a 3-node cluster. The default cap
// (20 %) rounds down to 0 nodes there, but a percentage cap allows at least
// one: the first node at maxPods is cordoned, the second refused, and the
// first released at minPods.
func TestCordonSeedConfigSmallCluster(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := os.ReadFile(filepath.Join(root, "shared", "config", "testdata", "seed.yml"))
	if err != nil {
		t.Fatal(err)
	}
	scaled := strings.Replace(strings.Replace(string(seed), "maxPods: 100", "maxPods: 5", 1), "minPods: 90", "minPods: 3", 1)
	if scaled == string(seed) || !strings.Contains(scaled, "maxPods: 5") || !strings.Contains(scaled, "minPods: 3") {
		t.Fatal("seed.yml no longer has the thresholds this test scales down")
	}
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	for i := range 3 {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("small-%d", i), nil))
	}
	cfg := harness.WriteConfig(t, scaled)
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.default.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: proxy.Kubeconfig(t, cp.Kubeconfig), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	// The cap is checked at the API, not only through OPS: the marks are
	// sampled every 20 ms until small-0's release, and the node writes are
	// counted at the proxy.
	stopWatch := cordonWatchMarks(t, c)

	cordonFill(t, c, "small-0", 0, 5)
	ops.WaitFor(t, 10*time.Second, "small-0 cordoned at maxPods", harness.Subject("ops.default.cordon.cordoned.small-0"))
	cordonFill(t, c, "small-1", 0, 5)
	m := ops.WaitFor(t, 10*time.Second, "small-1 refused", harness.Subject("ops.default.cordon.skipped.small-1"))
	if d := cordonDecision(t, m); d.Code != "cap-reached" || d.Cap != 1 || d.Managed != 3 || d.Held != 1 {
		t.Fatalf("refusal %+v", d)
	}
	harness.Never(t, 3*time.Second, "a second node marked, or small-1 patched, after the refusal", func() bool {
		return cordonMarks(c) > 1 || nodePatches(proxy, "small-1") != 0
	})
	cordonDrain(t, c, "small-0", 3, 5)
	ops.WaitFor(t, 10*time.Second, "small-0 released at minPods", harness.Subject("ops.default.cordon.uncordoned.small-0"))
	if most := stopWatch(); most != 1 {
		t.Fatalf("up to small-0's release at most %d node(s) carried the mark, want exactly 1 (the cap)", most)
	}
	if p0, p1 := nodePatches(proxy, "small-0"), nodePatches(proxy, "small-1"); p0 != 2 || p1 != 0 {
		t.Fatalf("node patches up to the release: small-0 %d (want 2: cordon, uncordon), small-1 %d (want 0)", p0, p1)
	}
	// The cap is free again: small-1 is cordoned on a later tick or event.
	cordonFill(t, c, "small-1", 5, 1)
	ops.WaitFor(t, 10*time.Second, "small-1 cordoned once the cap allows it", harness.Subject("ops.default.cordon.cordoned.small-1"))
}

// TestCordonDrainedNodeStaysCordoned: a node opswire cordoned is drained by a
// person (pods evicted through the Eviction API, then removed by "the
// kubelet"). opswire hands the node over (removes its mark, keeps the cordon)
// and says why in OPS; 15 s after its last pod is gone the node is still
// cordoned. A single eviction before that (a descheduler's) changes nothing.
func TestCordonDrainedNodeStaysCordoned(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("drained", nil))
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cordonRBAC(t, cp, "default"), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	cordonFill(t, c, "drained", 0, 6)
	ops.WaitFor(t, 10*time.Second, "drained cordoned", harness.Subject("ops.e2e.cordon.cordoned.drained"))

	// One eviction (a descheduler's): not a drain.
	evictPod(t, c, "drained-p0")
	harness.Eventually(t, 10*time.Second, "KUBE shows one pod evicting", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.drained")
		return s != nil && s.Evicting == 1
	})
	cordonWaitReconciled(t, cordon, cordonReconciles(cordon), 3)
	if nd := harness.GetNode(t, c, "drained"); !cordonMarked(nd) || len(cordonMsgs(t, ops, "e2e", "drained", "handedover")) != 0 {
		t.Fatal("a single eviction was taken for a drain")
	}

	// kubectl drain: the node is already cordoned, so it writes nothing to
	// it and evicts every pod.
	for i := 1; i < 6; i++ {
		evictPod(t, c, fmt.Sprintf("drained-p%d", i))
	}
	m := ops.WaitFor(t, 10*time.Second, "the drained node handed over", harness.Subject("ops.e2e.cordon.handedover.drained"))
	d := cordonDecision(t, m)
	if d.Action != "handover" || d.Code != "drained" || !strings.Contains(d.Reason, "Eviction API") || !strings.Contains(d.Reason, "until a person uncordons") {
		t.Fatalf("handover decision %+v", d)
	}
	// The kubelet finishes the evictions.
	cordonDrain(t, c, "drained", 0, 6)
	harness.Eventually(t, 10*time.Second, "KUBE shows the node empty", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.drained")
		return s != nil && s.Pods == 0
	})
	before := cordonReconciles(cordon)
	harness.Never(t, 15*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "drained").Spec.Unschedulable })
	if got := cordonReconciles(cordon) - before; got < 5 {
		t.Fatalf("only %v reconciliations in 15 s", got)
	}
	nd := harness.GetNode(t, c, "drained")
	if _, annotated := nd.Annotations[events.AnnotationAutoCordon]; cordonMarked(nd) || annotated {
		t.Fatalf("mark not removed at the handover: %v %v", nd.Labels, nd.Annotations)
	}
	if got := cordonMsgs(t, ops, "e2e", "drained", "uncordoned"); len(got) != 0 {
		t.Fatalf("uncordon published: %+v", got)
	}
	harness.Eventually(t, 10*time.Second, "the handover Event", func() bool {
		return len(cordonEvents(t, c, "drained", "OpswireCordonHandedOver")) == 1
	})
}

// TestCordonRecountsCrowdedNode: a node with 600 pods (more than one page of
// the recount LIST) and maxPods 500 is cordoned, and released at minPods.
// 30 more pods on it have terminated (Succeeded, Failed): the new cordon's
// recount reads the pods' metadata, which carries no phase, so only the API
// server's field selector keeps them out of the live count the decision
// reports.
func TestCordonRecountsCrowdedNode(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("crowded", nil))
	cfg := harness.WriteConfig(t, strings.Replace(strings.Replace(cordonConfig("500ms", "  maxCordonedPercent: 100\n"),
		"maxPods: 5", "maxPods: 500", 1), "minPods: 2", "minPods: 450", 1))
	startWatcher(t, cp, n, cfg, "w1")
	createPodsParallel(t, c, "crowded", 0, 630)
	for i := 600; i < 630; i++ {
		phase := corev1.PodSucceeded
		if i%2 == 1 {
			phase = corev1.PodFailed
		}
		harness.SetPodStatus(t, c, harness.Pod("default", fmt.Sprintf("crowded-p%d", i), "crowded"), func(s *corev1.PodStatus) { s.Phase = phase })
	}
	harness.Eventually(t, 60*time.Second, "KUBE counts 600 pods", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.crowded")
		return s != nil && s.Pods == 600
	})
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cordonRBAC(t, cp, "default"), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	m := ops.WaitFor(t, 20*time.Second, "crowded cordoned", harness.Subject("ops.e2e.cordon.cordoned.crowded"))
	if d := cordonDecision(t, m); d.Pods != 600 || d.MaxPods != 500 {
		t.Fatalf("cordon decision %+v", d)
	}
	cordonDrain(t, c, "crowded", 450, 600)
	m = ops.WaitFor(t, 30*time.Second, "crowded released at minPods", harness.Subject("ops.e2e.cordon.uncordoned.crowded"))
	if d := cordonDecision(t, m); d.Pods != 450 {
		t.Fatalf("uncordon decision %+v", d)
	}
	if got := cordonMsgs(t, ops, "e2e", "crowded", "failed"); len(got) != 0 {
		t.Fatalf("failures published: %+v", got)
	}
	if v := cordon.Metric(`opswire_cordon_failures_total{action="cordon"}`); v > 0 {
		t.Fatalf("failures metric %v", v)
	}
}

// sigstop stops a process (it keeps its sockets, answers nothing) until the
// test ends.
func sigstop(t *testing.T, p *harness.Process) {
	t.Helper()
	p.Freeze(t)
	// Cleanups run last-in first-out: this one before the harness stops it.
	t.Cleanup(func() { _ = syscall.Kill(p.Pid(), syscall.SIGCONT) })
}

func setUnschedulable(t *testing.T, c kubernetes.Interface, name string, v bool) {
	t.Helper()
	harness.UpdateNode(t, c, name, func(n *corev1.Node) { n.Spec.Unschedulable = v })
}

func setTaints(t *testing.T, c kubernetes.Interface, name string, taints ...corev1.Taint) {
	t.Helper()
	harness.UpdateNode(t, c, name, func(n *corev1.Node) { n.Spec.Taints = taints })
}

// cordonCountMarks counts the nodes carrying opswire's label in the API.
func cordonCountMarks(t *testing.T, c kubernetes.Interface) int {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: events.LabelAutoCordon})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// cordonMarks is cordonCountMarks for polling: -1 when the LIST failed.
func cordonMarks(c kubernetes.Interface) int {
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: events.LabelAutoCordon})
	if err != nil {
		return -1
	}
	return len(list.Items)
}

// cordonWatchMarks samples, every 20 ms until the returned stop is called,
// how many nodes carry opswire's mark in the API; stop returns the most seen.
func cordonWatchMarks(t *testing.T, c kubernetes.Interface) (stop func() int) {
	t.Helper()
	var most atomic.Int64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if k := int64(cordonMarks(c)); k > most.Load() {
				most.Store(k)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() { close(done); <-finished })
		return int(most.Load())
	}
	t.Cleanup(func() { stop() })
	return stop
}

// cordonVerbs returns the collected cordon decisions with a verb.
func cordonVerbs(t *testing.T, ops *harness.Collector, verb string) []harness.Msg {
	t.Helper()
	var out []harness.Msg
	for _, m := range ops.All() {
		if strings.HasPrefix(m.Subject, "ops.e2e.cordon."+verb+".") {
			out = append(out, m)
		}
	}
	return out
}

// evictPod evicts a pod through the Eviction API, as kubectl drain does.
func evictPod(t *testing.T, c kubernetes.Interface, name string) {
	t.Helper()
	err := c.PolicyV1().Evictions("default").Evict(context.Background(), &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
	})
	if err != nil {
		t.Fatalf("evict %s: %v", name, err)
	}
}

// createPodsParallel creates pods <node>-p<i> for i in [from, to) with a few
// concurrent clients.
func createPodsParallel(t *testing.T, c kubernetes.Interface, node string, from, to int) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := harness.Pod("default", fmt.Sprintf("%s-p%d", node, i), node)
				if _, err := c.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d pods not created, first: %v", len(errs), errs[0])
	}
}

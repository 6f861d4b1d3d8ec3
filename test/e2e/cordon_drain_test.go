package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// pacedDrainConfig: maxPods 5, minPods 2, every node may be cordoned. extra
// is appended (a test of the old behaviour adds drainEvictedPercent: 0).
func pacedDrainConfig(extra string) string {
	return cordonConfig("500ms", "  maxCordonedPercent: 100\n"+extra)
}

// evictAndFinish drains pods <node>-p<i>, i in [from, to), one at a time, as
// kubectl drain does when PodDisruptionBudgets allow one disruption at a
// time: each pod is evicted through the real Eviction API (the API server
// sets the DisruptionTarget condition), then "the kubelet" finishes its
// termination (a delete with grace 0, there is no kubelet), and the next is
// evicted only once the pod is gone from the API. At no moment is more than
// one pod evicting.
func evictAndFinish(t *testing.T, c kubernetes.Interface, node string, from, to int) {
	t.Helper()
	zero := int64(0)
	for i := from; i < to; i++ {
		name := fmt.Sprintf("%s-p%d", node, i)
		evictPod(t, c, name)
		err := c.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("finish %s: %v", name, err)
		}
		harness.WaitPodGone(t, c, "default", name, 10*time.Second)
	}
}

// deletePlain deletes pods <node>-p<i>, i in [from, to), one at a time with
// a plain delete (a scale-down: no eviction, no DisruptionTarget).
func deletePlain(t *testing.T, c kubernetes.Interface, node string, from, to int) {
	t.Helper()
	cordonDrain(t, c, node, from, to)
}

// waitHandover waits for the node's handover in OPS and fails at once if
// opswire uncordoned it instead (the behaviour before paced drains were
// recognised).
func waitHandover(t *testing.T, ops *harness.Collector, node string) events.CordonDecision {
	t.Helper()
	var got events.CordonDecision
	harness.Eventually(t, 10*time.Second, node+" handed over", func() bool {
		if u := cordonMsgs(t, ops, "e2e", node, "uncordoned"); len(u) > 0 {
			t.Fatalf("%s uncordoned in the middle of its drain: %s", node, u[0].Reason)
		}
		h := cordonMsgs(t, ops, "e2e", node, "handedover")
		if len(h) > 0 {
			got = h[0]
		}
		return len(h) > 0
	})
	return got
}

// nodeHandedOver checks, at the source, that opswire handed the node over
// exactly once and never released it: the node is cordoned without opswire's
// mark, the API accepted exactly two PATCHes of it (the cordon and the
// handover; an uncordon would be a third), the handover Event was recorded
// once and no uncordon Event at all.
func nodeHandedOver(t *testing.T, c kubernetes.Interface, px *harness.APIProxy, node string) {
	t.Helper()
	nd := harness.GetNode(t, c, node)
	if _, annotated := nd.Annotations[events.AnnotationAutoCordon]; !nd.Spec.Unschedulable || cordonMarked(nd) || annotated {
		t.Fatalf("%s: unschedulable %v, labels %v, annotations %v: not handed over", node, nd.Spec.Unschedulable, nd.Labels, nd.Annotations)
	}
	if got := nodePatches(px, node); got != 2 {
		t.Fatalf("%s patched %d times, want 2 (the cordon and the handover)", node, got)
	}
	harness.Eventually(t, 10*time.Second, node+"'s handover Event", func() bool {
		return cordonEventCount(t, c, node, "OpswireCordonHandedOver") >= 1
	})
	if got := cordonEventCount(t, c, node, "OpswireCordonHandedOver"); got != 1 {
		t.Fatalf("%s: %d handover Events, want 1", node, got)
	}
	if got := cordonEventCount(t, c, node, "OpswireUncordoned"); got != 0 {
		t.Fatalf("%s: %d uncordon Events", node, got)
	}
}

// TestCordonPacedDrainHandedOver: a node opswire cordoned at maxPods is
// drained at the pace PodDisruptionBudgets set, one pod at a time through the
// Eviction API, each gone before the next is evicted, so never more than one
// pod is evicting (the at-once rule never fires). When its count falls to
// minPods opswire hands it over instead of uncordoning it: it stays cordoned
// to the end of the drain and after, handed over exactly once and never
// uncordoned (counted at the API and in Events). On a second node, pods
// removed by plain deletes (a scale-down) after two evictions (a
// descheduler's) take it from 7 to minPods: 2 of 5 departures are evictions,
// below drainEvictedPercent 50, and the last ones plain; any eviction since
// opswire's cordon hands a node over at minPods (a drain with completions or
// a scale-down among its evictions looks the same), so it is handed over
// too, the price docs/cordon.md states. A third node that only loses pods to
// plain deletes is released.
func TestCordonPacedDrainHandedOver(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("paced", nil))
	harness.CreateNode(t, c, harness.Node("scaled", nil))
	harness.CreateNode(t, c, harness.Node("plain", nil))
	cfg := harness.WriteConfig(t, pacedDrainConfig(""))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg,
		Kubeconfig: proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	cordonFill(t, c, "paced", 0, 6)
	cordonFill(t, c, "scaled", 0, 7)
	cordonFill(t, c, "plain", 0, 7)
	ops.WaitFor(t, 10*time.Second, "paced cordoned", harness.Subject("ops.e2e.cordon.cordoned.paced"))
	ops.WaitFor(t, 10*time.Second, "scaled cordoned", harness.Subject("ops.e2e.cordon.cordoned.scaled"))
	ops.WaitFor(t, 10*time.Second, "plain cordoned", harness.Subject("ops.e2e.cordon.cordoned.plain"))

	// The paced drain: 6 → 2 (minPods), then on to empty.
	evictAndFinish(t, c, "paced", 0, 4)
	if d := waitHandover(t, ops, "paced"); d.Code != "drained" || d.Pods != 2 || !strings.Contains(d.Reason, "4 of the 4 pods that left") ||
		!strings.Contains(d.Reason, "until a person uncordons") {
		t.Fatalf("handover decision %+v", d)
	}
	evictAndFinish(t, c, "paced", 4, 6)

	// Two evictions, then a scale-down, 7 → 2: handed over.
	evictAndFinish(t, c, "scaled", 0, 2)
	deletePlain(t, c, "scaled", 2, 5)
	if d := waitHandover(t, ops, "scaled"); d.Code != "drained" || d.Pods != 2 ||
		!strings.Contains(d.Reason, "2 pod(s) left the node through the Eviction API since opswire cordoned it") {
		t.Fatalf("scaled: handover decision %+v", d)
	}
	// A scale-down alone, 7 → 2: released.
	deletePlain(t, c, "plain", 0, 5)
	m := ops.WaitFor(t, 10*time.Second, "plain released at minPods", harness.Subject("ops.e2e.cordon.uncordoned.plain"))
	if d := cordonDecision(t, m); d.Code != "min-reached" || d.Pods != 2 {
		t.Fatalf("release decision %+v", d)
	}

	harness.Eventually(t, 10*time.Second, "KUBE shows the drain", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.paced")
		return s != nil && s.Pods == 0 && s.Departed == 6 && s.DepartedEvicted == 6
	})
	if s := lastNode(t, n.JS, "kube.e2e.node.scaled"); s == nil || s.Departed != 5 || s.DepartedEvicted != 2 || s.EvictionStreak != 0 {
		t.Fatalf("KUBE's departures of scaled: %+v", s)
	}
	before := cordonReconciles(cordon)
	harness.Never(t, 10*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "paced").Spec.Unschedulable })
	if got := cordonReconciles(cordon) - before; got < 5 {
		t.Fatalf("only %v reconciliations in 10 s", got)
	}
	nodeHandedOver(t, c, proxy, "paced")
	nodeHandedOver(t, c, proxy, "scaled")
	if v := cordon.Metric(`opswire_cordon_handovers_total{dry_run="false"}`); v != 2 {
		t.Fatalf("handovers metric %v, want 2", v)
	}
	if got := cordonMsgs(t, ops, "e2e", "paced", "uncordoned"); len(got) != 0 {
		t.Fatalf("paced: uncordon published: %+v", got)
	}
	// The scale-down alone: released once, never handed over.
	if nd := harness.GetNode(t, c, "plain"); nd.Spec.Unschedulable || cordonMarked(nd) {
		t.Fatalf("plain not released: unschedulable %v, labels %v", nd.Spec.Unschedulable, nd.Labels)
	}
	if got := cordonEventCount(t, c, "plain", "OpswireCordonHandedOver"); got != 0 {
		t.Fatalf("plain: %d handover Events", got)
	}
	if got := nodePatches(proxy, "plain"); got != 2 {
		t.Fatalf("plain patched %d times, want 2 (the cordon and the release)", got)
	}
}

// TestCordonPacedDrainSurvivesFailover: the same paced drain with two
// replicas; the leader is SIGKILLed after two of the six evictions, and the
// rest of the drain, down to an empty node, finishes before the new leader
// has taken over (the lease runs 3 s): every evicted pod is gone when it
// first looks. What it decides on is what KUBE and the node hold (the
// watcher's departure totals and the baseline in opswire's mark), so it hands
// the node over, exactly once, and never uncordons it.
func TestCordonPacedDrainSurvivesFailover(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("paced", nil))
	cfg := harness.WriteConfig(t, pacedDrainConfig(""))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	kc := proxy.Kubeconfig(t, cordonRBAC(t, cp, "default"))
	r1 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kc, NATSURL: n.URL, ID: "r1"})
	r1.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 10*time.Second, "r1 leads", func() bool { return harness.LeaseHolder(c, "default", "opswire-cordon") == "r1" })
	r2 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kc, NATSURL: n.URL, ID: "r2"})
	r2.WaitReady(t, 60*time.Second)
	cordonFill(t, c, "paced", 0, 6)
	ops.WaitFor(t, 10*time.Second, "paced cordoned", harness.Subject("ops.e2e.cordon.cordoned.paced"))

	evictAndFinish(t, c, "paced", 0, 2)
	harness.Eventually(t, 10*time.Second, "r1 saw the first departures", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.paced")
		return s != nil && s.Pods == 4 && s.DepartedEvicted == 2
	})
	r1.Kill()
	evictAndFinish(t, c, "paced", 2, 6)
	if h := harness.LeaseHolder(c, "default", "opswire-cordon"); h != "r1" {
		// Only on a very slow machine: r2 then finds the drain under way.
		t.Logf("the lease moved to %q before the drain ended", h)
	}
	harness.Eventually(t, 10*time.Second, "r2 takes over", func() bool { return harness.LeaseHolder(c, "default", "opswire-cordon") == "r2" })
	if d := waitHandover(t, ops, "paced"); d.Replica != "r2" || d.Pods != 0 || !strings.Contains(d.Reason, "6 of the 6 pods that left") {
		t.Fatalf("handover decision %+v", d)
	}
	before := cordonReconciles(r2)
	harness.Never(t, 10*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "paced").Spec.Unschedulable })
	if got := cordonReconciles(r2) - before; got < 5 {
		t.Fatalf("only %v reconciliations in 10 s", got)
	}
	nodeHandedOver(t, c, proxy, "paced")
	if v := r2.Metric(`opswire_cordon_handovers_total{dry_run="false"}`); v != 1 {
		t.Fatalf("r2's handovers metric %v, want 1", v)
	}
	if got := cordonMsgs(t, ops, "e2e", "paced", "uncordoned"); len(got) != 0 {
		t.Fatalf("uncordon published: %+v", got)
	}
}

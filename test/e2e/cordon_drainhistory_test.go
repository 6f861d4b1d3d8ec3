package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/test/harness"
)

// daemonSetPod creates pod <node>-<name> on node, controlled by a DaemonSet
// (no controller manager runs, so nothing acts on the owner reference).
func daemonSetPod(t *testing.T, c kubernetes.Interface, node, name string) {
	t.Helper()
	p := harness.Pod("default", node+"-"+name, node)
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent",
		UID: types.UID("00000000-0000-0000-0000-00000000da75"), Controller: &yes}}
	harness.CreatePod(t, c, p)
}

// TestCordonPacedDrainAfterPlainDepartures: a node opswire cordoned at
// maxPods (5, minPods 2) holds between the bounds while pods come and go on
// it: its two DaemonSet pods are replaced (a rollout) and five other pods are
// replaced after plain deletes (completions, a rolling update), the count
// staying at 6. Then a person drains it at the pace PodDisruptionBudgets set,
// one eviction at a time, down to the two DaemonSet pods, which kubectl drain
// never evicts. Of the departures since the cordon only 4 of 9 are evictions
// (below drainEvictedPercent 50), yet the node must stay cordoned: the last
// departures are a streak of evictions, and opswire hands the node over
// (once, never uncordoned, counted at the API). The DaemonSet replacements
// are not counted as departures at all.
func TestCordonPacedDrainAfterPlainDepartures(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("ds", nil))
	cfg := harness.WriteConfig(t, pacedDrainConfig(""))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg,
		Kubeconfig: proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	daemonSetPod(t, c, "ds", "d0")
	daemonSetPod(t, c, "ds", "d1")
	cordonFill(t, c, "ds", 0, 4)
	ops.WaitFor(t, 10*time.Second, "ds cordoned", harness.Subject("ops.e2e.cordon.cordoned.ds"))

	// The DaemonSet rollout: d0, d1 replaced by d10, d11.
	zero := int64(0)
	for _, i := range []int{0, 1} {
		err := c.CoreV1().Pods("default").Delete(context.Background(), fmt.Sprintf("ds-d%d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if err != nil {
			t.Fatal(err)
		}
		daemonSetPod(t, c, "ds", fmt.Sprintf("d%d", 10+i))
	}
	// Five plain replacements: p0..p3 by p10..p13, then p10 by p14.
	for i, next := range []int{10, 11, 12, 13, 14} {
		gone := i
		if i == 4 {
			gone = 10
		}
		deletePlain(t, c, "ds", gone, gone+1)
		harness.CreatePod(t, c, harness.Pod("default", fmt.Sprintf("ds-p%d", next), "ds"))
	}
	harness.Eventually(t, 10*time.Second, "KUBE shows the plain departures, not the DaemonSet's", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.ds")
		return s != nil && s.Pods == 6 && s.Departed == 5 && s.DepartedEvicted == 0 && s.EvictionStreak == 0
	})

	// The person's paced drain of p11..p14: 6 → 2 (minPods), the DaemonSet pods stay.
	evictAndFinish(t, c, "ds", 11, 15)
	if d := waitHandover(t, ops, "ds"); d.Code != "drained" || d.Pods != 2 || !strings.Contains(d.Reason, "the last 4 pods that left") {
		t.Fatalf("handover decision %+v", d)
	}
	s := lastNode(t, n.JS, "kube.e2e.node.ds")
	if s == nil || s.Departed != 9 || s.DepartedEvicted != 4 || s.EvictionStreak != 4 || s.DepartedUnknown != 0 {
		t.Fatalf("KUBE's departures of ds: %+v", s)
	}
	harness.Never(t, 5*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "ds").Spec.Unschedulable })
	nodeHandedOver(t, c, proxy, "ds")
	if got := cordonMsgs(t, ops, "e2e", "ds", "uncordoned"); len(got) != 0 {
		t.Fatalf("uncordon published: %+v", got)
	}
}

// TestCordonDrainWhileWatcherDown: the only watcher is killed, and while
// none runs a person drains a node opswire cordoned (each pod evicted through
// the Eviction API, then gone). The watcher started afterwards finds the pods
// gone without having seen their final state: it counts them as departures
// of unknown final state (DepartedUnknown), possible evictions, and opswire
// hands the node over instead of uncordoning it as a scale-down.
func TestCordonDrainWhileWatcherDown(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("wd", nil))
	cfg := harness.WriteConfig(t, pacedDrainConfig(""))
	w1 := startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg,
		Kubeconfig: proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	cordonFill(t, c, "wd", 0, 6)
	ops.WaitFor(t, 10*time.Second, "wd cordoned", harness.Subject("ops.e2e.cordon.cordoned.wd"))
	harness.Eventually(t, 10*time.Second, "KUBE at 6", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.wd")
		return s != nil && s.Pods == 6
	})
	w1.Kill()
	evictAndFinish(t, c, "wd", 0, 6) // kubectl drain, paced, while no watcher runs
	w2 := startWatcher(t, cp, n, cfg, "w2")
	if d := waitHandover(t, ops, "wd"); d.Code != "drained" || d.Pods != 0 || !strings.Contains(d.Reason, "6 departures of unknown final state") {
		t.Fatalf("handover decision %+v", d)
	}
	if s := lastNode(t, n.JS, "kube.e2e.node.wd"); s == nil || s.Departed != 6 || s.DepartedUnknown != 6 || s.DepartedEvicted != 0 || s.EvictionStreak != 6 {
		t.Fatalf("KUBE's departures of wd: %+v", s)
	}
	// Counted once per pod, at the source.
	if got := w2.Metric(`opswire_watcher_departures_total{how="unknown"}`); got != 6 {
		t.Fatalf("w2 counted %v unknown departures, want 6", got)
	}
	harness.Never(t, 5*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "wd").Spec.Unschedulable })
	nodeHandedOver(t, c, proxy, "wd")
	if got := cordonMsgs(t, ops, "e2e", "wd", "uncordoned"); len(got) != 0 {
		t.Fatalf("uncordon published: %+v", got)
	}
}

package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCordonHandsOverADrainTheWatcherWasKilledIn: a paced drain of a node
// opswire cordoned, 6 pods → minPods 2. The watcher is SIGKILLed after the
// first two evictions are in KUBE; the other two pods are evicted while no
// watcher runs; a new watcher starts. The node is handed over, never
// uncordoned, and every state of the node in KUBE keeps the contract the
// cordon actor decides releases on (docs/watcher.md, Departures): no state
// shows its pod count lower than the state before by more than its
// departure total rose.
func TestCordonHandsOverADrainTheWatcherWasKilledIn(t *testing.T) {
	started := time.Now()
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("mid", nil))
	cfg := harness.WriteConfig(t, pacedDrainConfig(""))
	w1 := startWatcher(t, cp, n, cfg, "w1")
	history := harness.Collect(t, n.JS, "KUBE", "kube.e2e.node.mid", jetstream.DeliverAllPolicy)
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg,
		Kubeconfig: proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)
	cordonFill(t, c, "mid", 0, 6)
	ops.WaitFor(t, 10*time.Second, "mid cordoned", harness.Subject("ops.e2e.cordon.cordoned.mid"))

	evictAndFinish(t, c, "mid", 0, 2)
	harness.Eventually(t, 10*time.Second, "KUBE shows the first two evictions", func() bool {
		s := lastNode(t, n.JS, "kube.e2e.node.mid")
		return s != nil && s.Pods == 4 && s.DepartedEvicted == 2
	})
	w1.Kill()
	evictAndFinish(t, c, "mid", 2, 4) // to minPods while no watcher runs
	killed := time.Now()
	startWatcher(t, cp, n, cfg, "w2")
	if d := waitHandover(t, ops, "mid"); d.Code != "drained" || d.Pods != 2 {
		t.Fatalf("handover decision %+v", d)
	}
	t.Logf("handed over %v after the watcher's restart began", time.Since(killed).Round(time.Millisecond))
	harness.Never(t, 5*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "mid").Spec.Unschedulable })
	nodeHandedOver(t, c, proxy, "mid")

	var prev *events.NodeState
	for _, m := range history.All() {
		var s events.NodeState
		if err := json.Unmarshal(m.Data, &s); err != nil || s.Op == events.OpDelete {
			continue
		}
		if prev != nil && prev.Pods-s.Pods > s.Departed-prev.Departed {
			t.Fatalf("KUBE's state of mid at seq %d: %d pods and %d departed after %d and %d: the fall is not carried by departures",
				m.Seq, s.Pods, s.Departed, prev.Pods, prev.Departed)
		}
		prev = &s
	}
	if prev == nil || prev.Pods != 2 || prev.Departed != 4 {
		t.Fatalf("KUBE's last state of mid: %+v", prev)
	}
	t.Logf("total %v", time.Since(started).Round(time.Millisecond))
}

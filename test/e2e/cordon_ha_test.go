package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCordonCapHoldsOnALaggingWatchCache: production control planes run
// several kube-apiservers whose watch caches lag each other. Cap 1. Two
// nodes are at maxPods in KUBE; the watcher then stalls (SIGSTOP), so KUBE
// never shows the mark that follows. Leader r1, on API server A, marks one
// node and is SIGKILLed; r2 takes over on API server B, whose watch from etcd
// is held back, so B's watch cache has never seen r1's mark. r2's mirror
// shows no mark either; only a consistent read shows it. At most one node may
// carry opswire's mark, counted at the API through A.
func TestCordonCapHoldsOnALaggingWatchCache(t *testing.T) {
	cp := harness.StartControlPlane(t)
	b := cp.AddAPIServer(t, harness.WithWatchHold())
	n := harness.StartNATS(t)
	c := cp.Client
	names := []string{"ha-a", "ha-b", "ha-c", "ha-d"}
	for _, name := range names {
		harness.CreateNode(t, c, harness.Node(name, nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedNodes: 1\n  maxCordonedPercent: 100\n"))
	watcher := startWatcher(t, cp, n, cfg, "w1")
	busy := []string{"ha-b", "ha-d"}
	for _, name := range busy {
		cordonFill(t, c, name, 0, 5)
	}
	harness.Eventually(t, 20*time.Second, "KUBE counts maxPods on both busy nodes", func() bool {
		for _, name := range busy {
			if s := lastNode(t, n.JS, "kube.e2e.node."+name); s == nil || s.Pods != 5 {
				return false
			}
		}
		return true
	})
	// cordon's RBAC first: B authorizes from its own caches of the roles,
	// which learn nothing once its watch is held.
	kubeconfig := cordonRBAC(t, cp, "default") // a token of the ServiceAccount: valid on both servers
	onB := b.ServiceAccountKubeconfig(t, "default", "opswire-cordon")
	harness.Eventually(t, 20*time.Second, "B's caches hold the busy nodes and cordon's RoleBinding", func() bool {
		for _, name := range busy {
			if _, err := b.Client.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{ResourceVersion: "0"}); err != nil {
				return false
			}
		}
		_, err := b.Client.RbacV1().RoleBindings("default").Get(t.Context(), "opswire-cordon-lease", metav1.GetOptions{ResourceVersion: "0"})
		return err == nil
	})
	b.HoldWatch()
	sigstop(t, watcher)
	r1 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: "r1"})
	harness.Eventually(t, 30*time.Second, "r1 marks one busy node", func() bool { return cordonMarks(c) == 1 })
	r1.Kill()

	r2 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "r2", Kubeconfig: onB})
	harness.Eventually(t, 30*time.Second, "r2 leads on API server B", func() bool { return r2.Metric("opswire_leader") == 1 })
	took := time.Now()
	before := cordonReconciles(r2)
	harness.Never(t, 15*time.Second, "a second node marked after r2 took over", func() bool { return cordonMarks(c) > 1 })
	if got := cordonReconciles(r2) - before; got < float64(len(busy)) {
		t.Fatalf("r2 ran %v reconciliations in 15 s: it did not look at the busy nodes", got)
	}
	if got := markedInCache(t, b); got != 0 {
		t.Fatalf("B's watch cache shows %d marks: it did not lag, the test proved nothing", got)
	}
	t.Logf("cap 1 held for %s after the takeover on a lagging watch cache (%s)", time.Since(took).Round(time.Second),
		fmt.Sprintf("r2 refused %v cordons at the cap", r2.Metric(`opswire_cordon_refusals_total{reason="cap-reached"}`)))
}

// markedInCache counts the nodes with opswire's mark that an API server's
// watch cache serves (resourceVersion "0").
func markedInCache(t *testing.T, s *harness.APIServer) int {
	t.Helper()
	list, err := s.Client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{LabelSelector: events.LabelAutoCordon, ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

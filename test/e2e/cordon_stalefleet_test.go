package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/test/harness"
)

// TestCordonCapFleetFromAPIWithStaleMirror: the percentage cap's
// denominator (the managed nodes) and the NotReady nodes come from the API,
// not from a stale mirror. maxCordonedPercent 50, ten nodes, five of them at
// maxPods. The watcher is stopped (SIGSTOP); then four of the idle nodes are
// deleted and a fifth goes NotReady, which KUBE never shows. The mirror
// still says ten managed nodes, all Ready (cap 5); the API says six, one of
// them out of service (cap 3, one held): opswire cordons two nodes, not five.
func TestCordonCapFleetFromAPIWithStaleMirror(t *testing.T) {
	const nodes, busy = 10, 5
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	names := make([]string, nodes)
	for i := range nodes {
		names[i] = fmt.Sprintf("sf-%d", i)
		harness.CreateNode(t, c, harness.Node(names[i], nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 50\n"))
	watcher := startWatcher(t, cp, n, cfg, "w1")
	for _, name := range names[:busy] {
		cordonFill(t, c, name, 0, 5)
	}
	harness.Eventually(t, 20*time.Second, "KUBE counts maxPods on the busy nodes and knows every node", func() bool {
		for i, name := range names {
			s := lastNode(t, n.JS, "kube.e2e.node."+name)
			if s == nil || (i < busy && s.Pods != 5) {
				return false
			}
		}
		return true
	})
	sigstop(t, watcher)
	for _, name := range names[busy+1:] {
		if err := c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	harness.SetNodeStatus(t, c, names[busy], func(s *corev1.NodeStatus) {
		s.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "Test",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	})

	r1 := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: cordonRBAC(t, cp, "default"), NATSURL: n.URL, ID: "r1"})
	r1.WaitReady(t, 60*time.Second)
	if s := lastNode(t, n.JS, "kube.e2e.node."+names[nodes-1]); s == nil || s.Ready == "Unknown" {
		t.Fatal("KUBE is not stale: the test would prove nothing")
	}
	const want = 2 // 50 % of 6 managed = 3, one of them NotReady
	harness.Eventually(t, 15*time.Second, fmt.Sprintf("r1 holds %d nodes", want), func() bool { return cordonCountMarks(t, c) >= want })
	before := cordonReconciles(r1)
	harness.Never(t, 10*time.Second, fmt.Sprintf("more than %d nodes marked by opswire", want), func() bool { return cordonCountMarks(t, c) > want })
	if got := cordonReconciles(r1) - before; got < busy {
		t.Fatalf("r1 ran %v reconciliations in 10 s: it did not look at the nodes", got)
	}
	if r1.Metric(`opswire_cordon_refusals_total{reason="cap-reached"}`) == 0 {
		t.Fatal("r1 never refused a cordon: the cap was not what held")
	}
}

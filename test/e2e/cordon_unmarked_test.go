package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opswire/opswire/test/harness"
)

// TestCordonUncordonNotAppliedThenAPersonRemovesTheMark: fe-0 is cordoned
// and marked by opswire. Its pods leave, and opswire's uncordon PATCH never
// reaches the API server while its client gets a 504 (a proxy's): the
// write is in doubt. A person then removes opswire's label and mark, as
// docs/cordon.md recommends to take a node over, and keeps the node
// cordoned. The node moved on without the mark, but it is still
// unschedulable by opswire's own patch (its managedFields say so), so the
// settling read does not take the person's edit for the uncordon: no
// uncordoned in OPS, no OpswireUncordoned Event, the doubt settled unclear,
// and the node stays cordoned.
func TestCordonUncordonNotAppliedThenAPersonRemovesTheMark(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("fe-0", nil))
	harness.CreateNode(t, c, harness.Node("fe-1", nil))
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	replicas, leader, _ := cordonPair(t, cp, n, cfg, proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")))

	cordonFill(t, c, "fe-0", 0, 5)
	ops.WaitFor(t, 10*time.Second, "fe-0 cordoned", harness.Subject("ops.e2e.cordon.cordoned.fe-0"))
	patchFe0 := func(r harness.APIRequest) bool {
		return r.Method == http.MethodPatch && r.Path == "/api/v1/nodes/fe-0"
	}
	proxy.Refuse(patchFe0, http.StatusGatewayTimeout)
	cordonDrain(t, c, "fe-0", 0, 4)
	harness.Eventually(t, 20*time.Second, "opswire's uncordon PATCH answered 504", func() bool {
		return proxy.Count(func(r harness.APIRequest) bool { return patchFe0(r) && r.Status == http.StatusGatewayTimeout }) > 0
	})
	// A person takes the node over: mark removed, cordon kept.
	_, err := c.CoreV1().Nodes().Patch(context.Background(), "fe-0", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"node.kubernetes.io/autocordon":null},"annotations":{"opswire.io/autocordon":null}}}`),
		metav1.PatchOptions{FieldManager: "kubectl-label"})
	if err != nil {
		t.Fatal(err)
	}
	unclear := `opswire_cordon_writes_in_doubt_total{how="unclear"}`
	harness.Eventually(t, 30*time.Second, "the write in doubt settled", func() bool { return replicas[leader].Metric(unclear) >= 1 })
	if got := ops.Count(harness.Subject("ops.e2e.cordon.uncordoned.fe-0")); got != 0 {
		t.Errorf("%d uncordoned for fe-0 in OPS, want 0: its uncordon never reached the API server", got)
	}
	if got := cordonEventCount(t, c, "fe-0", "OpswireUncordoned"); got != 0 {
		t.Errorf("%d OpswireUncordoned Events for fe-0, want 0", got)
	}
	if node := harness.GetNode(t, c, "fe-0"); !node.Spec.Unschedulable || cordonMarked(node) {
		t.Errorf("fe-0 unschedulable=%v marked=%v, want the person's cordon without opswire's mark", node.Spec.Unschedulable, cordonMarked(node))
	}
}

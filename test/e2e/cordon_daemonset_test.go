package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/test/harness"
)

// TestCordonTaintModeKeepsDeletedDaemonSetPodsOut proves, with the real
// DaemonSet controller and scheduler, the trade-off docs/cordon.md states for
// taint mode: DaemonSet pods tolerate a cordon but not opswire's NoSchedule
// taint, so on a node opswire tainted a DaemonSet pod that is deleted (a
// rolling update of a CNI or log agent) is not re-created while the taint
// lasts, whereas on a node opswire cordoned it is. Taint mode's start-up
// warning names the trade-off. One control plane: a taint-mode cordon holds
// one node, then a cordon-mode one (its nodeSelector the other node) holds
// the other; the mark keeps each node's effect whatever mode runs.
func TestCordonTaintModeKeepsDeletedDaemonSetPodsOut(t *testing.T) {
	started := time.Now()
	cp := harness.StartControlPlane(t)
	c := cp.Client
	ctx := context.Background()
	harness.CreateNamespace(t, c, "agents")
	for _, mode := range []string{"taint", "cordon"} {
		harness.CreateNode(t, c, harness.Node(mode+"ed", map[string]string{"opswire-mode": mode}))
	}
	cp.StartControllers(t, harness.ControllerOptions{Scheduler: true})
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.invalid/agent:1"}}},
			},
		},
	}
	if _, err := c.AppsV1().DaemonSets("agents").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentOn := func(node string) *corev1.Pod {
		list, err := c.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if p := &list.Items[i]; p.Spec.NodeName == node && p.DeletionTimestamp == nil {
				return p
			}
		}
		return nil
	}
	harness.Eventually(t, 60*time.Second, "the DaemonSet's pod bound on each node", func() bool {
		return agentOn("tainted") != nil && agentOn("cordoned") != nil
	})

	n := harness.StartNATS(t)
	kubeconfig := cordonRBAC(t, cp, "default")
	base := harness.WriteConfig(t, cordonConfig("1m", ""))
	startWatcher(t, cp, n, base, "w1")
	t.Logf("control plane, controllers, NATS, watcher and DaemonSet up after %v", time.Since(started).Round(time.Millisecond))

	for _, tc := range []struct {
		mode, node string
		held       func(*corev1.Node) bool
	}{
		{"taint", "tainted", func(nd *corev1.Node) bool {
			return cordonMarked(nd) && !nd.Spec.Unschedulable && hasNoSchedule(nd, "node.kubernetes.io/autocordon")
		}},
		{"cordon", "cordoned", func(nd *corev1.Node) bool { return cordonMarked(nd) && nd.Spec.Unschedulable }},
	} {
		// No cap: the second mode's one managed node would be refused for
		// the node the first holds.
		cfg := harness.WriteConfig(t, cordonConfig("1m", "  maxCordonedPercent: 0\n  mode: "+tc.mode+
			"\n  nodeSelector: opswire-mode="+tc.mode+"\n"))
		cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kubeconfig, NATSURL: n.URL, ID: tc.mode})
		cordon.WaitReady(t, 60*time.Second)
		warned := strings.Contains(cordon.Logs(), "DaemonSet pods do not tolerate the taint")
		if warned != (tc.mode == "taint") {
			t.Fatalf("%s mode: start-up warning of the DaemonSet trade-off logged: %v", tc.mode, warned)
		}
		cordonFill(t, c, tc.node, 0, 4) // with the DaemonSet's pod: maxPods
		harness.Eventually(t, 20*time.Second, tc.node+" held by opswire in "+tc.mode+" mode", func() bool {
			return tc.held(harness.GetNode(t, c, tc.node))
		})
		if code := cordon.Stop(); code != 0 {
			t.Fatalf("%s-mode cordon exited %d", tc.mode, code)
		}
	}

	// A rolling update deletes each node's agent for the controller to
	// re-create.
	zero := int64(0)
	for _, node := range []string{"tainted", "cordoned"} {
		old := agentOn(node)
		if err := c.CoreV1().Pods("agents").Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	harness.Eventually(t, 30*time.Second, "the agent re-created and bound on the cordoned node", func() bool {
		return agentOn("cordoned") != nil
	})
	t.Logf("agent back on the cordoned node after %v", time.Since(deleted).Round(time.Millisecond))
	// The controller re-created the cordoned node's agent in the same pass
	// it would have the tainted node's: a further 10 s shows it holds back.
	harness.Never(t, 10*time.Second, "an agent re-created for the node opswire tainted (bound or not)", func() bool {
		list, err := c.CoreV1().Pods("agents").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
		if err != nil {
			t.Fatal(err)
		}
		return len(list.Items) != 1
	})
	if nd := harness.GetNode(t, c, "tainted"); !hasNoSchedule(nd, "node.kubernetes.io/autocordon") {
		t.Fatal("the taint is gone: the check above proves nothing")
	}
	t.Logf("total %v", time.Since(started).Round(time.Millisecond))
}

func hasNoSchedule(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key && t.Effect == corev1.TaintEffectNoSchedule {
			return true
		}
	}
	return false
}

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// cordonMarkOf reads opswire's mark annotation on a node.
func cordonMarkOf(t *testing.T, n *corev1.Node) (rv string, at time.Time) {
	t.Helper()
	var m struct {
		RV   string    `json:"rv"`
		Time time.Time `json:"time"`
	}
	if err := json.Unmarshal([]byte(n.Annotations[events.AnnotationAutoCordon]), &m); err != nil {
		t.Fatalf("node %s's mark: %v", n.Name, err)
	}
	return m.RV, m.Time
}

// forgeCordonEvent creates, as anyone allowed to create Events in default
// may, an Event under opswire-cordon's source claiming a release of node
// decided on version rv.
func forgeCordonEvent(t *testing.T, cp *harness.ControlPlane, name, reason, verb string, node *corev1.Node, rv string) *corev1.Event {
	t.Helper()
	now := metav1.Now()
	ev, err := cp.Client.CoreV1().Events(metav1.NamespaceDefault).Create(context.Background(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID,
			ResourceVersion: rv},
		Reason: reason, Message: "opswire " + verb + " (cordon): forged by a tenant", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "opswire-cordon", Host: "r1"}, Count: 1, FirstTimestamp: now, LastTimestamp: now,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestCordonForgedReleaseEventIgnoredByTheNextLeader: fe-0 is cordoned and
// marked by the leader. Someone who may create Events in default forges two
// release Events under opswire-cordon's source for it: an OpswireUncordoned
// naming the node's current version, and an OpswireCordonHandedOver naming
// an older version than the mark's, created after the mark. The leader is
// SIGKILLed; the standby's recovery reads the Events against the live node,
// which still carries the mark both claim to have removed: its window holds
// the cordon alone, no uncordoned or handedover reaches OPS, both Events are
// counted as refused, and fe-0 stays cordoned and marked.
func TestCordonForgedReleaseEventIgnoredByTheNextLeader(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("fe-0", nil))
	harness.CreateNode(t, c, harness.Node("fe-1", nil))
	cfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	replicas, first, second := cordonPair(t, cp, n, cfg, cordonRBAC(t, cp, "default"))

	cordonFill(t, c, "fe-0", 0, 5)
	ops.WaitFor(t, 10*time.Second, "fe-0 cordoned", harness.Subject("ops.e2e.cordon.cordoned.fe-0"))
	node := harness.GetNode(t, c, "fe-0")
	markRV, markTime := cordonMarkOf(t, node)
	forgeCordonEvent(t, cp, "fe-0.forged-uncordon", "OpswireUncordoned", "uncordoned", node, node.ResourceVersion)
	// The second forgery names a version before the mark's; what gives it
	// away is that it was created after the mark. creationTimestamp has
	// whole seconds: the forger acts in a later second than the cordon.
	harness.Eventually(t, 5*time.Second, "a second after fe-0's mark", func() bool {
		return time.Now().After(markTime.Truncate(time.Second).Add(time.Second))
	})
	old := forgeCordonEvent(t, cp, "fe-0.forged-handover", "OpswireCordonHandedOver", "handedover", node, "1")
	if old.CreationTimestamp.Time.Before(markTime) {
		t.Fatalf("setup: forged Event created %v, before the mark %v", old.CreationTimestamp.Time, markTime)
	}
	t.Logf("fe-0 marked at %v (decided on version %s); Events forged", markTime, markRV)

	replicas[first].Kill()
	next := replicas[second]
	harness.Eventually(t, 20*time.Second, "the new leader seeded its window", func() bool {
		return next.Metric("opswire_rate_window_seeded_actions") >= 1
	})
	if v := next.Metric("opswire_rate_window_seeded_actions"); v != 1 {
		t.Fatalf("new leader's window seeded with %v actions, want 1 (fe-0's cordon alone):\n%s", v, ops.Describe())
	}
	released := func() bool {
		return len(cordonMsgs(t, ops, "e2e", "fe-0", "uncordoned"))+len(cordonMsgs(t, ops, "e2e", "fe-0", "handedover")) > 0
	}
	if released() {
		t.Fatalf("a forged release was published:\n%s", ops.Describe())
	}
	if v := next.Metric(`opswire_cordon_recovery_events_rejected_total{why="forged"}`); v != 2 {
		t.Fatalf("%v Events refused by the recovery, want 2", v)
	}
	// The audits of the recovery are queued before the window is seeded;
	// the leader's next reconciliations come after them.
	cordonWaitReconciled(t, next, cordonReconciles(next), 4)
	harness.Never(t, 2*time.Second, "a forged release published", released)
	if got := harness.GetNode(t, c, "fe-0"); !got.Spec.Unschedulable || !cordonMarked(got) {
		t.Fatalf("fe-0 released: unschedulable=%v labels=%v", got.Spec.Unschedulable, got.Labels)
	}
}

// nodePatchesSent counts the PATCHes of a node that reached the API (at the
// proxy, whatever the API answered).
func nodePatchesSent(px *harness.APIProxy, node string) int {
	return px.Count(func(r harness.APIRequest) bool {
		return r.Method == http.MethodPatch && strings.TrimSuffix(r.Path, "/") == "/api/v1/nodes/"+node
	})
}

// TestCordonModeSwitchLeavesHeldNodesAlone: three nodes are cordoned in
// cordon mode and stay at maxPods. cordon restarts with mode: taint. The
// nodes it holds keep what their marks list (the cordon): no PATCH reaches
// the API for any of them (counted at the proxy), nothing is published, and
// they stay cordoned, without opswire's taint.
func TestCordonModeSwitchLeavesHeldNodesAlone(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	names := []string{"ms-0", "ms-1", "ms-2"}
	for _, name := range append(names, "ms-free") {
		harness.CreateNode(t, c, harness.Node(name, nil))
	}
	cordonCfg := harness.WriteConfig(t, cordonConfig("500ms", "  maxCordonedPercent: 100\n"))
	taintCfg := harness.WriteConfig(t, cordonConfig("500ms", "  mode: taint\n  maxCordonedPercent: 100\n"))
	startWatcher(t, cp, n, cordonCfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	kc := proxy.Kubeconfig(t, cordonRBAC(t, cp, "default"))

	first := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cordonCfg, Kubeconfig: kc, NATSURL: n.URL, ID: "c1"})
	first.WaitReady(t, 60*time.Second)
	for _, name := range names {
		cordonFill(t, c, name, 0, 5)
	}
	harness.Eventually(t, 20*time.Second, "three nodes cordoned", func() bool { return cordonCountMarked(t, c) == len(names) })
	if code := first.Stop(); code != 0 {
		t.Fatalf("SIGTERM exit code %d", code)
	}
	before := map[string]int{}
	for _, name := range names {
		before[name] = nodePatchesSent(proxy, name)
	}
	published := len(ops.All())

	restart := time.Now()
	second := harness.StartService(t, "cordon", harness.ServiceOptions{Config: taintCfg, Kubeconfig: kc, NATSURL: n.URL, ID: "c2"})
	second.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 10*time.Second, "the taint-mode replica leads", func() bool { return second.Metric("opswire_leader") == 1 })
	// Every node looked at twice at least: the pass at the term's start and
	// a tick.
	cordonWaitReconciled(t, second, 0, 2*4)
	patched := func() bool {
		for _, name := range names {
			if nodePatchesSent(proxy, name) != before[name] {
				return true
			}
		}
		return false
	}
	if patched() {
		t.Fatalf("held nodes patched after the switch to taint mode:\n%s", ops.Describe())
	}
	harness.Never(t, 2*time.Second, "a PATCH of a held node", patched)
	t.Logf("taint-mode replica ran %v reconciliations in %v without a PATCH", cordonReconciles(second), time.Since(restart).Round(time.Millisecond))
	if got := ops.All()[published:]; len(got) != 0 {
		t.Fatalf("published after the switch: %v", got)
	}
	for _, name := range names {
		got := harness.GetNode(t, c, name)
		opswireTaint := slices.ContainsFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key == events.LabelAutoCordon })
		if !got.Spec.Unschedulable || opswireTaint || !cordonMarked(got) {
			t.Fatalf("%s after the switch: unschedulable=%v taints=%v labels=%v", name, got.Spec.Unschedulable, got.Spec.Taints, got.Labels)
		}
	}
}

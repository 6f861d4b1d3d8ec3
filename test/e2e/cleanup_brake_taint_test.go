package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCleanupOutOfServiceTaintOutranksBrake: 4 of 6 nodes Unknown, so the
// mass-failure brake holds every force deletion; a person taints one of
// those nodes out-of-service. The StatefulSet pod and the plain pod stuck
// there are force-deleted and audited while the brake stays on, as PodGC's
// gcTerminating ignores the zone state for a node not Ready and tainted
// out-of-service; a plain pod stuck on another Unknown node stays held
// (MassNodeFailure, reported once).
func TestCleanupOutOfServiceTaintOutranksBrake(t *testing.T) {
	started := time.Now()
	cp, ops, leader, nodes := brakedCluster(t)
	down, other := nodes[0], nodes[1]
	db := harness.Pod("apps", "db-0", down)
	yes := true
	db.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: types.UID("sts-db"), Controller: &yes}}
	released := []*corev1.Pod{harness.CreatePod(t, cp.Client, db), harness.CreatePod(t, cp.Client, harness.Pod("apps", "tmp-0", down))}
	held := harness.CreatePod(t, cp.Client, harness.Pod("apps", "web-0", other))
	var deadline time.Time
	for _, p := range append(released, held) {
		deadline = deleteGracefully(t, cp, "apps", p.Name).Add(4 * time.Second) // terminatingTimeout
	}
	// Held first: the node is only Unknown, and the brake is on.
	for _, p := range append(released, held) {
		harness.Eventually(t, time.Until(deadline)+10*time.Second, "skip of "+p.Name, func() bool { return ops.Count(outcomeOf(p, "skipped")) > 0 })
	}
	for _, p := range append(released, held) {
		if !uidExists(t, cp, p) {
			t.Fatalf("%s removed while its node was only Unknown and the brake on", p.Name)
		}
	}

	taintNode(t, cp, down, corev1.Taint{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	tainted := time.Now()
	harness.Eventually(t, 10*time.Second, "the pods on the out-of-service node force-deleted", func() bool {
		return !uidExists(t, cp, released[0]) && !uidExists(t, cp, released[1])
	})
	t.Logf("removed %v after the taint", time.Since(tainted).Round(time.Millisecond))
	for _, p := range released {
		d := decision(t, ops.WaitFor(t, 5*time.Second, "forcedeleted "+p.Name, outcomeOf(p, "forcedeleted")))
		if d.Reason != "StuckTerminating" || d.Node != down {
			t.Fatalf("%s: %+v", p.Name, d)
		}
		harness.Eventually(t, 5*time.Second, "CleanupForceDeleted Event on "+p.Name, func() bool {
			return strings.Contains(strings.Join(cleanupEvents(t, cp, "apps", string(p.UID)), ","), "CleanupForceDeleted")
		})
	}
	if v := leader.Metric("opswire_cleanup_brake_engaged"); v != 1 {
		t.Fatalf("brake gauge %v, want 1: 4 of 6 nodes are still not Ready", v)
	}
	harness.Never(t, 3*time.Second, "web-0, on an Unknown node without the taint, removed under the brake (3 ticks)", func() bool {
		return !uidExists(t, cp, held)
	})
	d := decision(t, ops.WaitFor(t, time.Second, "skip of web-0", outcomeOf(held, "skipped")))
	if d.Reason != "MassNodeFailure" || !strings.Contains(d.Message, "4 of 6 nodes") {
		t.Fatalf("web-0: %+v, want skipped MassNodeFailure", d)
	}
	if v := leader.Metric(decisionsMetric("skipped", "MassNodeFailure")); v != 2 {
		t.Fatalf("MassNodeFailure skips counted %v, want 2 (tmp-0 before the taint and web-0, once each)", v)
	}
	t.Logf("whole test %v", time.Since(started).Round(time.Millisecond))
}

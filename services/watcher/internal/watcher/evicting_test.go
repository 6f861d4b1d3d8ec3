package watcher

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// TestNodeCountsPodsEvicting: a pod evicted through the Eviction API (the
// DisruptionTarget condition the API server sets) counts in its node's
// Evicting, and the node is republished when that changes, although the
// pod's contribution to Pods does not change.
func TestNodeCountsPodsEvicting(t *testing.T) {
	var p1 *corev1.Pod
	f := setup(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		p1 = s.pod("ns", "p1", "n1")
		s.pods = append(s.pods, p1, s.pod("ns", "p2", "n1"))
	})
	node := func() events.NodeState {
		var n events.NodeState
		f.last(subject.Node("c", "n1"), &n)
		return n
	}
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 2 })
	if n := node(); n.Evicting != 0 {
		t.Fatalf("evicting = %d before any eviction", n.Evicting)
	}
	evicted := p1.DeepCopy()
	evicted.ResourceVersion = f.src.nextRV()
	evicted.Status.Conditions = append(evicted.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: events.DisruptionEvictionByEvictionAPI})
	f.src.podW.Modify(evicted)
	f.eventually("one pod evicting on n1", func() bool { n := node(); return n.Evicting == 1 && n.Pods == 2 })

	// Once it has left the node, it no longer counts anywhere.
	gone := evicted.DeepCopy()
	gone.ResourceVersion = f.src.nextRV()
	f.src.podW.Delete(gone)
	f.eventually("evicting back to 0", func() bool { n := node(); return n.Evicting == 0 && n.Pods == 1 })
}

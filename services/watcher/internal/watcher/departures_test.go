package watcher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// evictedBy returns a copy of the pod as the Eviction API leaves it: the
// DisruptionTarget condition with reason EvictionByEvictionAPI.
func evictedBy(f *fixture, p *corev1.Pod) *corev1.Pod {
	e := p.DeepCopy()
	e.ResourceVersion = f.src.nextRV()
	e.Status.Conditions = append(e.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: events.DisruptionEvictionByEvictionAPI})
	return e
}

func (f *fixture) node(name string) events.NodeState {
	var n events.NodeState
	f.last(subject.Node("c", name), &n)
	return n
}

// TestNodeCountsDepartures: every pod that stops counting on a node is one
// departure in the node's running totals, and those that left through the
// Eviction API are counted apart, whether their evicting state was stored
// first, or the pod was evicted and removed before its sync ran (only the
// delete event still shows the condition). A plain delete and a completion
// are departures, not evictions; the tombstone of an evicted pod says so.
func TestNodeCountsDepartures(t *testing.T) {
	var ps []*corev1.Pod
	f := setup(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		for _, name := range []string{"p1", "p2", "p3", "p4", "p5"} {
			p := s.pod("ns", name, "n1")
			ps = append(ps, p)
			s.pods = append(s.pods, p)
		}
	})
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 5 })
	if n := f.node("n1"); n.Departed != 0 || n.DepartedEvicted != 0 {
		t.Fatalf("departures before any: %+v", n)
	}
	del := func(p *corev1.Pod) {
		gone := p.DeepCopy()
		gone.ResourceVersion = f.src.nextRV()
		f.src.podW.Delete(gone)
	}

	// Evicted, stored as evicting, then removed (a kubelet finishing it).
	e1 := evictedBy(f, ps[0])
	f.src.podW.Modify(e1)
	f.eventually("p1 evicting", func() bool { return f.node("n1").Evicting == 1 })
	del(e1)
	f.eventually("p1's departure, an eviction", func() bool {
		n := f.node("n1")
		return n.Pods == 4 && n.Departed == 1 && n.DepartedEvicted == 1
	})
	var tomb events.PodState
	if !f.last(subject.Pod("c", "ns", "p1"), &tomb) || tomb.Op != events.OpDelete || !tomb.EvictedByAPI() {
		t.Fatalf("p1's tombstone %+v does not say it was evicted", tomb)
	}

	// Evicted and removed at once: only the delete event has the condition.
	del(evictedBy(f, ps[1]))
	f.eventually("p2's departure, an eviction", func() bool {
		n := f.node("n1")
		return n.Pods == 3 && n.Departed == 2 && n.DepartedEvicted == 2
	})

	// A plain delete (a scale-down) and a completion: departures only.
	del(ps[2])
	done := ps[3].DeepCopy()
	done.ResourceVersion = f.src.nextRV()
	done.Status.Phase = corev1.PodSucceeded
	f.src.podW.Modify(done)
	f.eventually("p3's and p4's departures", func() bool {
		n := f.node("n1")
		return n.Pods == 1 && n.Departed == 4 && n.DepartedEvicted == 2
	})
	tomb = events.PodState{}
	if !f.last(subject.Pod("c", "ns", "p3"), &tomb) || tomb.EvictedByAPI() {
		t.Fatalf("p3's tombstone %+v says evicted", tomb)
	}
	// The completed pod's removal later is no second departure.
	del(done)
	f.eventually("p4's tombstone", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "p4"), &s) && s.Op == events.OpDelete
	})
	if n := f.node("n1"); n.Departed != 4 || n.DepartedEvicted != 2 {
		t.Fatalf("after the completed pod's removal: %+v", n)
	}

	// A restarted watcher carries on from what KUBE holds.
	seed, err := LoadSeed(context.Background(), f.js, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got := seed[nodePrefix+"n1"].left; got != (departures{all: 4, evicted: 2}) {
		t.Fatalf("seeded departures %+v", got)
	}
}

// TestDepartureCountedOnceAcrossRetries: the tombstone of an evicted pod is
// published while every publish times out (but is stored), so it is retried
// again and again: the departure still counts once, and the watcher forgets
// the pod once the tombstone is acknowledged.
func TestDepartureCountedOnceAcrossRetries(t *testing.T) {
	pub := &timingOut{}
	var p *corev1.Pod
	f := setupWith(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		p = s.pod("ns", "p1", "n1")
		s.pods = append(s.pods, p, s.pod("ns", "p2", "n1"))
	}, func(js jetstream.JetStream) AsyncPublisher { pub.js = js; return pub }, func(o *Options) { o.RetryMax = 20 * time.Millisecond })
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 2 })

	pub.lying.Store(true)
	gone := evictedBy(f, p)
	f.src.podW.Delete(gone)
	f.eventually("the tombstone retried", func() bool {
		return testutil.ToFloat64(f.w.m.errors.WithLabelValues("pod")) >= 5
	})
	pub.lying.Store(false)
	f.eventually("the watcher forgets the pod", func() bool {
		f.w.mu.Lock()
		defer f.w.mu.Unlock()
		_, had := f.w.published[podPrefix+"ns/p1"]
		return !had && len(f.w.leaving) == 0 && len(f.w.evictedAtDelete) == 0 && !f.w.published[nodePrefix+"n1"].doubt
	})
	if n := f.node("n1"); n.Pods != 1 || n.Departed != 1 || n.DepartedEvicted != 1 {
		t.Fatalf("node after the retried tombstone: %+v", n)
	}
}

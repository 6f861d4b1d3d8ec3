package watcher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
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
		_, had := f.w.published.get(podPrefix + "ns/p1")
		return !had && len(f.w.leaving) == 0 && f.w.deleted.get(podPrefix+"ns/p1") == (deleteNote{}) && !f.w.published.nodes[nodePrefix+"n1"].doubt
	})
	if n := f.node("n1"); n.Pods != 1 || n.Departed != 1 || n.DepartedEvicted != 1 {
		t.Fatalf("node after the retried tombstone: %+v", n)
	}
}

// TestNodeRecountWaitsForDepartures: the informer removes a pod from its
// index before the pod's sync runs. A recount of its node in that moment
// (queued by something else) would publish the lower count without the
// departure, and the cordon actor could release a node in the middle of a
// paced drain on it. The recount waits (briefly, bounded) for the pod syncs,
// which count the departures and queue the node again. The syncs are called
// one by one here, in the order of that race.
func TestNodeRecountWaitsForDepartures(t *testing.T) {
	_, js := natstest.Connect(t, jetstream.WithPublishAsyncTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	src.nodes = append(src.nodes, src.node("n1"))
	p1 := src.pod("ns", "p1", "n1")
	src.pods = append(src.pods, p1, src.pod("ns", "p2", "n1"))
	pods, nodes := src.informers()
	w, err := New(pods, nodes, js, Options{Cluster: "c", TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		t.Fatal("caches did not sync")
	}
	go w.collectAcks()
	f := &fixture{t: t, js: js, src: src, w: w}
	sync := func(key string) {
		t.Helper()
		if err := w.sync(key); err != nil {
			t.Fatalf("sync %s: %v", key, err)
		}
	}
	settled := func() bool { // every publish acknowledged
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.leaving) == 0 && w.published.nodes[nodePrefix+"n1"].hash != 0
	}
	sync("p/ns/p1")
	sync("p/ns/p2")
	sync("n/n1")
	f.eventually("n1 with 2 pods", func() bool { return f.nodePods("n1") == 2 && settled() })

	// p1 is evicted and removed at once; the informer's index drops it, its
	// sync has not run yet.
	f.src.podW.Delete(evictedBy(f, p1))
	f.eventually("p1 out of the index", func() bool {
		keys, _ := pods.GetIndexer().IndexKeys(byNode, "n1")
		return len(keys) == 1
	})
	sync("n/n1") // the racing recount
	w.mu.Lock()
	deferred := w.deferred["n1"]
	w.mu.Unlock()
	if n := f.node("n1"); n.Pods != 2 || deferred != 1 || testutil.ToFloat64(w.m.deferred) != 1 {
		t.Fatalf("the recount published %+v before p1's departure was counted", n)
	}
	sync("p/ns/p1") // counts the departure, queues the node
	sync("n/n1")
	f.eventually("n1 with 1 pod and the eviction", func() bool {
		n := f.node("n1")
		return n.Pods == 1 && n.Departed == 1 && n.DepartedEvicted == 1
	})

	// Bounded: should the watcher's count ever be off, the node is delayed,
	// never stopped.
	w.mu.Lock()
	w.onNode["n1"] += 3
	w.mu.Unlock()
	f.src.podW.Delete(f.src.pod("ns", "p2", "n1"))
	f.eventually("p2 out of the index", func() bool {
		keys, _ := pods.GetIndexer().IndexKeys(byNode, "n1")
		return len(keys) == 0
	})
	sync("p/ns/p2")
	for range maxNodeDeferrals {
		sync("n/n1")
	}
	if n := f.node("n1"); n.Pods != 1 {
		t.Fatalf("published %+v while deferring", n)
	}
	sync("n/n1")
	f.eventually("n1 published anyway", func() bool { n := f.node("n1"); return n.Pods == 0 && n.Departed == 2 })
}

// TestDepartureKinds: a DaemonSet pod's or a mirror pod's departure is not
// counted (kubectl drain never evicts them); a plain departure ends the
// streak of evictions; a pod found gone without a delete event that carried
// its final state (stored by an earlier watcher and gone while none ran, or
// a relist's DeletedFinalStateUnknown tombstone) is a departure of unknown
// final state, which continues the streak.
func TestDepartureKinds(t *testing.T) {
	_, js := natstest.Connect(t, jetstream.WithPublishAsyncTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	src.nodes = append(src.nodes, src.node("n1"))
	owned := func(name, kind string) *corev1.Pod {
		p := src.pod("ns", name, "n1")
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{Kind: kind, Name: "o", Controller: &yes}}
		return p
	}
	ds, mirror, p1, p2 := owned("ds", "DaemonSet"), owned("mirror", "Node"), src.pod("ns", "p1", "n1"), src.pod("ns", "p2", "n1")
	src.pods = append(src.pods, ds, mirror, p1, p2)
	pods, nodes := src.informers()
	w, err := New(pods, nodes, js, Options{Cluster: "c", TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		t.Fatal("caches did not sync")
	}
	go w.collectAcks()
	f := &fixture{t: t, js: js, src: src, w: w}
	sync := func(keys ...string) {
		t.Helper()
		for _, key := range keys {
			if err := w.sync(key); err != nil {
				t.Fatalf("sync %s: %v", key, err)
			}
		}
	}
	settled := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.leaving) == 0
	}
	want := func(what string, pods int, d departures) {
		t.Helper()
		f.eventually(what, func() bool {
			n := f.node("n1")
			return settled() && n.Pods == pods && n.Departed == d.all && n.DepartedEvicted == d.evicted &&
				n.DepartedUnknown == d.unknown && n.EvictionStreak == d.streak
		})
	}
	// Two pods known to KUBE (an earlier watcher stored them) that this
	// watcher never sees: gone while none ran.
	w.mu.Lock()
	for _, name := range []string{"away1", "away2"} {
		// (Not in onNode: n1's recounts below do not wait for them.)
		w.published.set(podPrefix+"ns/"+name, record{hash: 1, uid: "uid-ns-" + name, node: "n1"})
	}
	w.mu.Unlock()
	sync("p/ns/ds", "p/ns/mirror", "p/ns/p1", "p/ns/p2", "n/n1")
	want("n1 with 4 pods", 4, departures{})

	del := func(p *corev1.Pod) {
		gone := p.DeepCopy()
		gone.ResourceVersion = f.src.nextRV()
		f.src.podW.Delete(gone)
		f.eventually(p.Name+" out of the index", func() bool {
			_, exists, _ := pods.GetIndexer().GetByKey("ns/" + p.Name)
			return !exists
		})
	}
	// The DaemonSet's and the mirror pod's departures (even an eviction) are
	// not counted.
	del(evictedBy(f, ds))
	del(mirror)
	sync("p/ns/ds", "p/ns/mirror", "n/n1")
	want("exempt departures not counted", 2, departures{})

	// An eviction, then the two pods gone while away: a streak of three.
	del(evictedBy(f, p1))
	sync("p/ns/p1", "p/ns/away1", "p/ns/away2", "n/n1")
	want("an eviction and two unknown departures", 1, departures{all: 3, evicted: 1, unknown: 2, streak: 3})

	// A relist's tombstone: the final state is unknown even though the
	// tombstone carries the last state the informer had.
	last, _, _ := pods.GetIndexer().GetByKey("ns/p2")
	del(p2)
	w.mu.Lock()
	w.deleted.forget("p/ns/p2") // as if the watch had missed the delete
	w.mu.Unlock()
	w.noteDeleted("p/ns/p2", cache.DeletedFinalStateUnknown{Key: "ns/p2", Obj: last})
	sync("p/ns/p2", "n/n1")
	want("a tombstone's departure unknown", 0, departures{all: 4, evicted: 1, unknown: 3, streak: 4})

	// A plain departure ends the streak.
	p3 := src.pod("ns", "p3", "n1")
	f.src.podW.Add(p3)
	f.eventually("p3 in the index", func() bool { _, ok, _ := pods.GetIndexer().GetByKey("ns/p3"); return ok })
	sync("p/ns/p3", "n/n1")
	want("p3 counted", 1, departures{all: 4, evicted: 1, unknown: 3, streak: 4})
	del(p3)
	sync("p/ns/p3", "n/n1")
	want("a plain departure ends the streak", 0, departures{all: 5, evicted: 1, unknown: 3})

	for how, want := range map[string]float64{"plain": 1, "evicted": 1, "unknown": 3, "exempt": 2} {
		if got := testutil.ToFloat64(w.m.departed.WithLabelValues(how)); got != want {
			t.Errorf("opswire_watcher_departures_total{how=%q} = %v, want %v", how, got, want)
		}
	}
	seed, err := LoadSeed(context.Background(), js, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got := seed[nodePrefix+"n1"].left; got != (departures{all: 5, evicted: 1, unknown: 3}) {
		t.Fatalf("seeded departures %+v", got)
	}
}

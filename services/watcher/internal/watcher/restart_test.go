package watcher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
)

// TestFeedQueuesPodsAndTheirDeparturesBeforeNodes: a term's first recount of
// a node must come after the syncs that count the departures of its pods,
// those still cached and those only KUBE holds (gone while no term ran), or
// the node would show its pods gone before their departures (the cordon
// actor would release a node being drained).
func TestFeedQueuesPodsAndTheirDeparturesBeforeNodes(t *testing.T) {
	src := newSource()
	src.nodes = append(src.nodes, src.node("n1"), src.node("n2"))
	src.pods = append(src.pods, src.pod("ns", "stays", "n1"), src.pod("ns", "also", "n2"))
	pods, nodes := src.informers()
	w, err := New(pods, nodes, nil, Options{Cluster: "c"}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		t.Fatal("caches did not sync")
	}
	seed := map[string]record{
		"p/ns/stays": {uid: "uid-ns-stays", node: "n1"},
		"p/ns/gone":  {uid: "uid-ns-gone", node: "n1"},
		"p/ns/gone2": {uid: "uid-ns-gone2", node: "n2"},
		"n/n1":       {uid: "uid-n1", pods: 2, seeded: true},
		"n/old":      {uid: "uid-old", seeded: true},
	}
	w.feed(ctx, pods.GetIndexer().ListKeys(), nodes.GetIndexer().ListKeys(), seed)
	var order []string
	for w.queue().Len() > 0 {
		k, _ := w.queue().Get()
		order = append(order, k)
		w.queue().Done(k)
	}
	lastPod := slices.IndexFunc(order, func(k string) bool { return strings.HasPrefix(k, nodePrefix) })
	for _, k := range []string{"p/ns/stays", "p/ns/also", "p/ns/gone", "p/ns/gone2", "n/n1", "n/n2", "n/old"} {
		i := slices.Index(order, k)
		switch {
		case i < 0:
			t.Fatalf("%s not fed (fed %v)", k, order)
		case strings.HasPrefix(k, podPrefix) && i > lastPod:
			t.Fatalf("pod key %s fed after a node key: %v", k, order)
		}
	}
}

// TestRestartCountsDeparturesItsPredecessorNeverStored: a watcher killed
// between storing a pod's tombstone and storing its node's recount leaves
// KUBE with the pod gone and the node's totals without its departure. The
// next term's recount of the node shows the fall in its pod count with as
// many more departures, of unknown final state (an eviction of a drain, as
// far as anyone can tell), and its streak grows: the contract the cordon
// actor decides releases on (docs/watcher.md, Departures). A node whose pods
// all left with their departures stored gets no extra departure.
func TestRestartCountsDeparturesItsPredecessorNeverStored(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		storeNodeAfterTombstone   bool
		wantDeparted, wantUnknown int
	}{
		{"departure never stored", false, 1, 1},
		{"departure stored", true, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := natstest.Connect(t, jetstream.WithPublishAsyncTimeout(5*time.Second))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
				t.Fatal(err)
			}
			src := newSource()
			src.nodes = append(src.nodes, src.node("n1"))
			var p1 *corev1.Pod
			for _, name := range []string{"p1", "p2", "p3"} {
				p := src.pod("ns", name, "n1")
				if p1 == nil {
					p1 = p
				}
				src.pods = append(src.pods, p)
			}
			pods, nodes := src.informers()
			w, err := New(pods, nodes, js, Options{Cluster: "c", Workers: 2, TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			go pods.Run(ctx.Done())
			go nodes.Run(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
				t.Fatal("caches did not sync")
			}
			f := &fixture{t: t, js: js, src: src, w: w}
			term := func(seed map[string]record) (stop func()) {
				tctx, tcancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- w.Run(tctx, seed) }()
				return func() { tcancel(); <-done }
			}
			stop := term(nil)
			f.eventually("term 1 stores n1 with 3 pods", func() bool { return f.nodePods("n1") == 3 })
			stop()

			// What the killed watcher stored: p1's tombstone, and the node's
			// recount or not.
			src.podW.Delete(p1)
			publish(t, js, subject.Pod("c", "ns", "p1"), "ns/p1", events.TypePod,
				events.PodState{Op: events.OpDelete, UID: string(p1.UID), Namespace: "ns", Name: "p1"})
			if tc.storeNodeAfterTombstone {
				n := f.node("n1")
				n.Pods, n.Departed = 2, n.Departed+1
				n.ResourceVersion = src.nextRV()
				publish(t, js, subject.Node("c", "n1"), "n1", events.TypeNode, n)
			}
			f.eventually("the cache without p1", func() bool { return len(pods.GetIndexer().ListKeys()) == 2 })

			seed, err := LoadSeed(ctx, js, "c")
			if err != nil {
				t.Fatal(err)
			}
			defer term(seed)()
			f.eventually("term 2 recounts n1", func() bool { return f.nodePods("n1") == 2 })
			f.eventually("n1 settled", func() bool {
				f.w.mu.Lock()
				defer f.w.mu.Unlock()
				return f.w.published.nodes[nodePrefix+"n1"].pods == 2 && f.w.queue().Len() == 0
			})
			if n := f.node("n1"); n.Departed != tc.wantDeparted || n.DepartedUnknown != tc.wantUnknown || n.EvictionStreak != tc.wantUnknown {
				t.Fatalf("n1 after the restart: %d pods, departed %d (unknown %d, streak %d), want departed %d (unknown %d, streak %d)",
					n.Pods, n.Departed, n.DepartedUnknown, n.EvictionStreak, tc.wantDeparted, tc.wantUnknown, tc.wantUnknown)
			}
		})
	}
}

// publish stores a state in KUBE as a watcher would.
func publish(t *testing.T, js jetstream.JetStream, subj, ceSubject, typ string, state any) {
	t.Helper()
	ev, err := envelope.New("test/"+subj+"/"+time.Now().String(), "test", typ, ceSubject, state, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), ev.Msg(subj)); err != nil {
		t.Fatal(err)
	}
}

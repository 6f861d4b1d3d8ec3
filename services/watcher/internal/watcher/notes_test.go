package watcher

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/testkit"
)

// fakeClock is the delete notes' clock, moved by the test.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// standby builds a watcher whose delete notes run on clk, with its informers
// synced and no term running.
func standby(t *testing.T, ctx context.Context, src *source, pub AsyncPublisher, clk *fakeClock) *Watcher {
	t.Helper()
	pods, nodes := src.informers()
	w, err := New(pods, nodes, pub, Options{Cluster: "c", Workers: 2, TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w.now, w.deleted = clk.now, newDeleteNotes(clk.now())
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		t.Fatal("caches did not sync")
	}
	return w
}

// deleteAll deletes pods through the fake watch and waits until the watcher
// has received as many delete events in all.
func deleteAll(t *testing.T, w *Watcher, src *source, total float64, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		gone := p.DeepCopy()
		gone.ResourceVersion = src.nextRV()
		src.podW.Delete(gone)
	}
	testkit.Eventually(t, 10*time.Second, "the informer to deliver the deletes", func() bool {
		return testutil.ToFloat64(w.m.received.WithLabelValues("pod", "delete")) >= total
	})
}

// TestStandbyDoesNotKeepADeleteNoteForEveryDeletedPod: a standby replica (no
// term running, its informers run, its handlers enqueue nothing) notes every
// pod delete event, for a takeover (deleteNote), and a note is otherwise
// dropped only by its key's sync or tombstone ack, which a standby never
// runs. Pods with generated names (ReplicaSets, Jobs) never reuse a key, so
// without a bound a standby kept one note per pod ever deleted. Notes older
// than what a takeover can need (deleteNoteHorizon) are dropped.
func TestStandbyDoesNotKeepADeleteNoteForEveryDeletedPod(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := newSource()
	src.nodes = append(src.nodes, src.node("n1"))
	clk := &fakeClock{}
	w := standby(t, ctx, src, nil, clk)
	const n = 1000
	var pods []*corev1.Pod
	for i := 0; i < n; i++ {
		p := src.pod("ns", fmt.Sprintf("job-%05d", i), "n1")
		src.podW.Add(p)
		pods = append(pods, p)
	}
	deleteAll(t, w, src, n, pods...)
	// Two horizons later, with a delete at each, the first 1,000 notes are gone.
	for i := 1; i <= 2; i++ {
		clk.advance(deleteNoteHorizon)
		p := src.pod("ns", fmt.Sprintf("later-%d", i), "n1")
		src.podW.Add(p)
		deleteAll(t, w, src, float64(n+i), p)
	}
	w.mu.Lock()
	kept := w.deleted.len()
	w.mu.Unlock()
	if kept != 2 {
		t.Fatalf("a standby keeps %d delete notes after %d pods were deleted over two horizons, want the 2 of the last horizon", kept, n+2)
	}
}

// TestTakeoverReadsTheStandbysDeleteNotes: pods deleted while this replica
// stood by, whose tombstones no leader stored, are departures its next term
// counts as it saw them (plain, evicted) if it saw their delete events within
// deleteNoteHorizon, and as unknown before that; the notes of pods KUBE does
// not hold alive are dropped when the term starts.
func TestTakeoverReadsTheStandbysDeleteNotes(t *testing.T) {
	_, js := natstest.Connect(t, jetstream.WithPublishAsyncTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	src.nodes = append(src.nodes, src.node("n1"))
	byName := map[string]*corev1.Pod{}
	for _, name := range []string{"early", "plain", "evicted", "last"} {
		byName[name] = src.pod("ns", name, "n1")
		src.pods = append(src.pods, byName[name])
	}
	clk := &fakeClock{}
	w := standby(t, ctx, src, js, clk)
	f := &fixture{t: t, js: js, src: src, w: w}

	// A first term stores the four pods; then this replica stands by (another
	// leads and stores nothing, or none does).
	tctx, endTerm := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(tctx, nil) }()
	f.eventually("term 1 stores n1 with 4 pods", func() bool { return f.nodePods("n1") == 4 })
	endTerm()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	deleteAll(t, w, src, 1, byName["early"])
	clk.advance(deleteNoteHorizon)
	stray := src.pod("ns", "stray", "n1") // never stored in KUBE
	src.podW.Add(stray)
	deleteAll(t, w, src, 4, byName["plain"], evictedBy(f, byName["evicted"]), stray)
	clk.advance(deleteNoteHorizon)
	deleteAll(t, w, src, 5, byName["last"]) // early's note is two horizons old: dropped

	seed, err := LoadSeed(ctx, js, "c")
	if err != nil {
		t.Fatal(err)
	}
	tctx, endTerm = context.WithCancel(ctx)
	defer endTerm()
	go func() { _ = w.Run(tctx, seed) }()
	f.eventually("term 2 counts the departures: plain, evicted and last as seen, early as unknown", func() bool {
		n := f.node("n1")
		return n.Pods == 0 && n.Departed == 4 && n.DepartedEvicted == 1 && n.DepartedUnknown == 1
	})
	f.eventually("no note left (stray's dropped at the term's start, the others settled)", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.deleted.len() == 0
	})
}

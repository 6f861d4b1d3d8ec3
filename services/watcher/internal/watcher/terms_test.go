package watcher

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
)

// A replica that lost the lease and won it again runs a second term in the
// same process: what changed in between (a pod deleted, one created) reaches
// KUBE, as after a restart.
func TestSecondTermPublishesWhatChangedMeanwhile(t *testing.T) {
	_, js := natstest.Connect(t, jetstream.WithPublishAsyncTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	src.nodes = append(src.nodes, src.node("n1"))
	gone := src.pod("ns", "gone", "n1")
	src.pods = append(src.pods, gone)
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
		return func() {
			tcancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("term did not end")
			}
		}
	}
	stop := term(nil)
	f.eventually("term 1 publishes n1", func() bool { return f.nodePods("n1") == 1 })
	stop()

	// Between the terms (another replica leads, or none).
	src.podW.Delete(gone)
	src.podW.Add(src.pod("ns", "new", "n1"))

	seed, err := LoadSeed(ctx, js, "c")
	if err != nil {
		t.Fatal(err)
	}
	stop = term(seed)
	defer stop()
	f.eventually("term 2 tombstones the deleted pod", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "gone"), &s) && s.Op == events.OpDelete
	})
	f.eventually("term 2 publishes the new pod", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "new"), &s) && s.Op != events.OpDelete
	})
}

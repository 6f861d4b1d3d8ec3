package watcher

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
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

// partition is a TCP proxy to the NATS server that the test can cut (every
// connection closed, new ones refused) and heal: a replica whose network
// fails while the server and the other replica carry on.
type partition struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func newPartition(t *testing.T, to string) *partition {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &partition{ln: ln, to: to}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return p
}

func (p *partition) url() string { return "nats://" + p.ln.Addr().String() }

func (p *partition) set(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// TestOldLeaderBufferedPublishDoesNotResurrectADeletedPod: replica A
// leads, and its node loses the network (API server and NATS). A pod changes;
// A's publish of the new state fails; A's term ends (lease lost). Replica B takes over, the pod is
// deleted, B stores its tombstone and forgets the pod. When A's network comes
// back, a connection with nats.go's reconnect buffer (as the watcher's had)
// flushed the buffered upsert, with a new id (pod/<uid>/<rv>), so KUBE
// stored it after the tombstone: a ghost pod that no replica will ever
// correct (B has no record of it; a later term's seed would tombstone it with
// the same id pod/<uid>/delete, dropped as a duplicate within
// nats.duplicates). The watcher's connection buffers nothing
// (app.Spec.NoPublishBuffer): the publish fails at once and only the
// watcher's own retry, in a term, publishes the key again.
func TestOldLeaderBufferedPublishDoesNotResurrectADeletedPod(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ncB, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ncB.Close)
	jsB, err := jetstream.New(ncB, jetstream.WithPublishAsyncTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.EnsureStreams(ctx, jsB, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	part := newPartition(t, srv.Addr().String())
	// As the watcher's connection (app.Spec.NoPublishBuffer: no reconnect buffer).
	ncA, err := natsx.Connect(natsx.Options{URL: part.url(), ReconnectBufSize: -1}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ncA.Close)
	jsA, err := jetstream.New(ncA, jetstream.WithPublishAsyncTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}

	last := func() (events.PodState, bool) {
		var s events.PodState
		st, err := jsB.Stream(ctx, "KUBE")
		if err != nil {
			return s, false
		}
		m, err := st.GetLastMsgForSubject(ctx, subject.Pod("c", "ns", "p"))
		if err != nil {
			return s, false
		}
		return s, json.Unmarshal(m.Data, &s) == nil
	}
	replica := func(src *source, pub AsyncPublisher) *Watcher {
		pods, nodes := src.informers()
		w, err := New(pods, nodes, pub, Options{Cluster: "c", Workers: 2, TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		go pods.Run(ctx.Done())
		go nodes.Run(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
			t.Fatal("caches did not sync")
		}
		return w
	}

	// Replica A leads and stores the pod.
	srcA := newSource()
	srcA.nodes = append(srcA.nodes, srcA.node("n1"))
	p := srcA.pod("ns", "p", "n1")
	srcA.pods = append(srcA.pods, p)
	wA := replica(srcA, jsA)
	actx, endTermA := context.WithCancel(ctx)
	termA := make(chan error, 1)
	go func() { termA <- wA.Run(actx, nil) }()
	testkit.Eventually(t, 15*time.Second, "A stores the pod", func() bool { s, ok := last(); return ok && s.Op == events.OpUpsert })

	// A's network fails. The pod changes (a container restarts): A's publish is buffered, times out.
	part.set(true)
	testkit.Eventually(t, 15*time.Second, "A to see NATS down", func() bool { return !ncA.IsConnected() })
	changed := p.DeepCopy()
	changed.ResourceVersion = srcA.nextRV()
	changed.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", RestartCount: 1}}
	srcA.podW.Modify(changed)
	testkit.Eventually(t, 15*time.Second, "A's publish of the change to fail", func() bool {
		return testutil.ToFloat64(wA.m.errors.WithLabelValues("pod")) >= 1
	})
	endTermA() // renewDeadline passed: A lost the lease
	select {
	case <-termA:
	case <-time.After(15 * time.Second):
		t.Fatal("A's term did not end")
	}

	// Replica B leads; the pod is deleted: B stores its tombstone.
	srcB := newSource()
	srcB.nodes = append(srcB.nodes, srcB.node("n1"))
	wB := replica(srcB, jsB)
	seed, err := LoadSeed(ctx, jsB, "c")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = wB.Run(ctx, seed) }()
	testkit.Eventually(t, 15*time.Second, "B stores the tombstone", func() bool { s, ok := last(); return ok && s.Op == events.OpDelete })

	// A's network comes back (the process stayed up, campaigning again).
	part.set(false)
	testkit.Eventually(t, 15*time.Second, "A reconnected", ncA.IsConnected)
	if err := ncA.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := ncB.FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if s, ok := last(); !ok || s.Op != events.OpDelete {
		t.Fatalf("KUBE's last state of the deleted pod ns/p is %q (rv %s, restarts %v), stored by the old leader after the new "+
			"leader's tombstone: a ghost pod", s.Op, s.ResourceVersion, s.Containers)
	}
}

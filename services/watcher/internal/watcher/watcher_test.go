package watcher

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

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

type fixture struct {
	t   *testing.T
	js  jetstream.JetStream
	src *source
	w   *Watcher
}

func setup(t *testing.T, build func(s *source)) *fixture {
	t.Helper()
	return setupWith(t, build, nil, nil)
}

// setupWith is setup with the publisher wrapped (nil: the JetStream context
// itself) and the options edited.
func setupWith(t *testing.T, build func(s *source), wrap func(jetstream.JetStream) AsyncPublisher, edit func(*Options)) *fixture {
	t.Helper()
	_, js := natstest.Connect(t, jetstream.WithPublishAsyncTimeout(5*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	src := newSource()
	build(src)
	pods, nodes := src.informers()
	opts := Options{Cluster: "c", Workers: 2, TombstoneTTL: time.Hour}
	if edit != nil {
		edit(&opts)
	}
	var pub AsyncPublisher = js
	if wrap != nil {
		pub = wrap(js)
	}
	w, err := New(pods, nodes, pub, opts, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		t.Fatal("caches did not sync")
	}
	go w.Run(ctx, nil)
	return &fixture{t: t, js: js, src: src, w: w}
}

func (f *fixture) last(subj string, out any) bool {
	st, err := f.js.Stream(context.Background(), "KUBE")
	if err != nil {
		return false
	}
	m, err := st.GetLastMsgForSubject(context.Background(), subj)
	if err != nil {
		return false
	}
	return json.Unmarshal(m.Data, out) == nil
}

// eventually waits up to 10 s for cond (testkit.Eventually).
func (f *fixture) eventually(what string, cond func() bool) {
	f.t.Helper()
	testkit.Eventually(f.t, 10*time.Second, what, cond)
}

func (f *fixture) nodePods(name string) int {
	var s events.NodeState
	if !f.last(subject.Node("c", name), &s) {
		return -1
	}
	return s.Pods
}

func (f *fixture) lastSeq() uint64 {
	st, _ := f.js.Stream(context.Background(), "KUBE")
	info, _ := st.Info(context.Background())
	return info.State.LastSeq
}

func TestPublishesOnlyChangesAndCounts(t *testing.T) {
	var p1 *corev1.Pod
	f := setup(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		p1 = s.pod("ns", "p1", "n1")
		s.pods = append(s.pods, p1, s.pod("ns", "p2", "n1"))
	})
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 2 })

	// A resourceVersion-only change (a heartbeat-like update) is skipped.
	before := f.lastSeq()
	same := p1.DeepCopy()
	same.ResourceVersion = f.src.nextRV()
	f.src.podW.Modify(same)
	f.eventually("unchanged update counted", func() bool {
		return testutil.ToFloat64(f.w.m.unchanged.WithLabelValues("pod")) >= 1
	})
	if got := f.lastSeq(); got != before {
		t.Fatalf("%d messages stored for a no-op update", got-before)
	}

	// Failed leaves the node's count.
	failed := same.DeepCopy()
	failed.ResourceVersion, failed.Status.Phase, failed.Status.Reason = f.src.nextRV(), corev1.PodFailed, "Evicted"
	f.src.podW.Modify(failed)
	f.eventually("count 1", func() bool { return f.nodePods("n1") == 1 })
	// The count says which pod list it was taken from: at least the event
	// that changed it, so an actor's recount can ask for nothing older.
	var n1 events.NodeState
	f.last(subject.Node("c", "n1"), &n1)
	if counted, _ := strconv.Atoi(n1.PodsResourceVersion); counted < mustAtoi(t, failed.ResourceVersion) {
		t.Fatalf("count taken at resourceVersion %q, before the change at %s", n1.PodsResourceVersion, failed.ResourceVersion)
	}

	// Deletion writes a tombstone.
	f.src.podW.Delete(failed)
	f.eventually("tombstone", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "p1"), &s) && s.Op == events.OpDelete && s.UID == "uid-ns-p1"
	})
}

// TestNodeIDsNeverRepeatForANewState is DESIGN §3's trap: a node going
// 1 → 0 → 1 pods must store the final state, not lose it as a "duplicate".
func TestNodeIDsNeverRepeatForANewState(t *testing.T) {
	var p *corev1.Pod
	f := setup(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		p = s.pod("ns", "a", "n1")
		s.pods = append(s.pods, p)
	})
	f.eventually("count 1", func() bool { return f.nodePods("n1") == 1 })
	gone := p.DeepCopy()
	gone.ResourceVersion = f.src.nextRV()
	f.src.podW.Delete(gone)
	f.eventually("count 0", func() bool { return f.nodePods("n1") == 0 })
	f.src.podW.Add(f.src.pod("ns", "b", "n1"))
	f.eventually("count back to 1", func() bool { return f.nodePods("n1") == 1 })
}

func TestSeedSkipsWhatIsStored(t *testing.T) {
	f := setup(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		s.pods = append(s.pods, s.pod("ns", "p1", "n1"))
	})
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 1 })
	seed, err := LoadSeed(context.Background(), f.js, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(seed) != 2 {
		t.Fatalf("seed has %d entries, want 2", len(seed))
	}
	// The watcher records a publish when its ack arrives, which may be just
	// after the message is visible in KUBE.
	f.eventually("the watcher's records match the seed", func() bool {
		f.w.mu.Lock()
		defer f.w.mu.Unlock()
		for k, r := range seed {
			if got, _ := f.w.published.get(k); got != r {
				return false
			}
		}
		return true
	})
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

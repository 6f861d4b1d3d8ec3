package watcher

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// timingOut stores every message but, while lying is set, reports each
// publish as timed out: the worst case of an outage, where the watcher
// cannot know what KUBE holds.
type timingOut struct {
	js    jetstream.JetStream
	lying atomic.Bool
}

func (p *timingOut) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	fut, err := p.js.PublishMsgAsync(msg, opts...)
	if err != nil || !p.lying.Load() {
		return fut, err
	}
	<-fut.Ok() // stored
	f := &failedFuture{msg: msg, err: make(chan error, 1)}
	f.err <- jetstream.ErrAsyncPublishTimeout
	return f, nil
}

type failedFuture struct {
	msg *nats.Msg
	err chan error
}

func (f *failedFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f *failedFuture) Err() <-chan error            { return f.err }
func (f *failedFuture) Msg() *nats.Msg               { return f.msg }

// TestGhostPodConverges is issue 19's ghost pod: a pod created and deleted
// while every publish times out (but is stored) must end as a tombstone in
// KUBE, and its node's count must come back to what the cache says.
func TestGhostPodConverges(t *testing.T) {
	pub := &timingOut{}
	f := setupWith(t, func(s *source) { s.nodes = append(s.nodes, s.node("n1")) },
		func(js jetstream.JetStream) AsyncPublisher { pub.js = js; return pub }, nil)
	f.eventually("node with 0 pods", func() bool { return f.nodePods("n1") == 0 })

	pub.lying.Store(true)
	p := f.src.pod("ns", "ghost", "n1")
	f.src.podW.Add(p)
	// The upsert and the node's count of 1 are stored, but not acknowledged.
	f.eventually("the pod stored with its node counting it", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "ghost"), &s) && s.Op == events.OpUpsert && f.nodePods("n1") == 1
	})
	gone := p.DeepCopy()
	gone.ResourceVersion = f.src.nextRV()
	f.src.podW.Delete(gone)
	f.eventually("the tombstone attempted", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "ghost"), &s) && s.Op == events.OpDelete
	})
	pub.lying.Store(false) // NATS is back

	f.eventually("tombstone with the uid and node recounted", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "ghost"), &s) && s.Op == events.OpDelete && s.UID == "uid-ns-ghost" &&
			f.nodePods("n1") == 0
	})
	f.eventually("the watcher forgets the pod once the tombstone is acknowledged", func() bool {
		f.w.mu.Lock()
		defer f.w.mu.Unlock()
		_, had := f.w.published.get(podPrefix + "ns/ghost")
		return !had && !f.w.published.nodes[nodePrefix+"n1"].doubt
	})
}

// refusing fails every publish before sending it while down, as the
// watcher's connection does while disconnected: it has no reconnect buffer
// (app.Spec.NoPublishBuffer), so nats.go returns ErrReconnectBufExceeded.
type refusing struct {
	js   jetstream.JetStream
	down atomic.Bool
}

func (p *refusing) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if p.down.Load() {
		return nil, nats.ErrReconnectBufExceeded
	}
	return p.js.PublishMsgAsync(msg, opts...)
}

// TestPublishesRefusedWhileDisconnectedConverge: what the reconnect buffer
// used to carry over a NATS blip, the watcher's own retry must: a pod created
// during the outage is stored once NATS is back, one created and deleted
// during it leaves no live state, and the node's count matches the cache.
// Each refused attempt of a pod's first publish must not count the pod on
// its node again (onNode), or every later recount of the node would wait for
// departures that never come.
func TestPublishesRefusedWhileDisconnectedConverge(t *testing.T) {
	pub := &refusing{}
	f := setupWith(t, func(s *source) { s.nodes = append(s.nodes, s.node("n1")) },
		func(js jetstream.JetStream) AsyncPublisher { pub.js = js; return pub },
		func(o *Options) { o.RetryMax = 100 * time.Millisecond })
	f.eventually("node with 0 pods", func() bool { return f.nodePods("n1") == 0 })
	refused := func() float64 { return testutil.ToFloat64(f.w.m.errors.WithLabelValues("pod")) }

	pub.down.Store(true)
	f.src.podW.Add(f.src.pod("ns", "stays", "n1"))
	ghost := f.src.pod("ns", "ghost", "n1")
	f.src.podW.Add(ghost)
	f.eventually("both pods' publishes refused, several times", func() bool { return refused() >= 10 })
	gone := ghost.DeepCopy()
	gone.ResourceVersion = f.src.nextRV()
	f.src.podW.Delete(gone)
	before := refused()
	f.eventually("publishes after the delete refused too", func() bool { return refused() >= before+4 })
	pub.down.Store(false) // NATS is back

	f.eventually("the pod that stays stored, the ghost not alive, the node counting 1", func() bool {
		var stays, g events.PodState
		ghostAlive := f.last(subject.Pod("c", "ns", "ghost"), &g) && g.Op != events.OpDelete
		return f.last(subject.Pod("c", "ns", "stays"), &stays) && stays.Op == events.OpUpsert && !ghostAlive &&
			f.nodePods("n1") == 1
	})
	f.w.mu.Lock()
	onNode := f.w.onNode["n1"]
	f.w.mu.Unlock()
	if onNode != 1 {
		t.Fatalf("the watcher counts %d pods on n1 after the outage, want 1 (one per refused attempt?)", onNode)
	}
}

// TestOversizedNodeKeepsWhatOpswireReads: a node with thousands of labels is
// published with only the labels opswire reads; a state that cannot fit even
// then is counted and not retried blind.
func TestOversizedNodeKeepsWhatOpswireReads(t *testing.T) {
	big := func(s *source, name string, labels int) *corev1.Node {
		n := s.node(name)
		n.Labels = map[string]string{"pool": "a", events.LabelDoNotCordon: "true"}
		for i := 0; i < labels; i++ {
			n.Labels[fmt.Sprintf("example.com/label-%05d", i)] = strings.Repeat("v", 40)
		}
		return n
	}
	// A short retry period, so the test watches several of them.
	const retryMax = 100 * time.Millisecond
	f := setupWith(t, func(s *source) {
		s.nodes = append(s.nodes, big(s, "n1", 2000), s.node("n2"))
	}, nil, func(o *Options) {
		o.MaxPayload = 64 << 10 // 2,000 labels of ~70 bytes do not fit
		o.KeepNodeLabel = func(k string) bool { return k == "pool" }
		o.RetryMax = retryMax
	})
	f.eventually("n1 in KUBE", func() bool { return f.nodePods("n1") == 0 })
	var s events.NodeState
	f.last(subject.Node("c", "n1"), &s)
	if len(s.Labels) != 2 || s.Labels["pool"] != "a" || s.Labels[events.LabelDoNotCordon] != "true" {
		t.Fatalf("labels %v, want pool and donotcordon only", s.Labels)
	}

	// A pod whose state cannot fit: counted once, not retried.
	p := f.src.pod("ns", "huge", "n2")
	p.Labels = map[string]string{"opswire.io/ignore": strings.Repeat("x", 70<<10)}
	f.src.podW.Add(p)
	f.eventually("oversized pod counted", func() bool {
		return testutil.ToFloat64(f.w.m.oversized.WithLabelValues("pod")) == 1
	})
	f.eventually("n2 counts it", func() bool { return f.nodePods("n2") == 1 })
	// Watched over many retry periods (the exponential backoff reaches
	// retryMax after a few): a build that retries it, at any period up to
	// retryMax, tries it again in this time.
	for end := time.Now().Add(10 * retryMax); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if v := testutil.ToFloat64(f.w.m.oversized.WithLabelValues("pod")); v != 1 {
			t.Fatalf("oversized pod tried %v times, want 1 (no blind retries)", v)
		}
		if v := testutil.ToFloat64(f.w.m.errors.WithLabelValues("pod")); v != 0 {
			t.Fatalf("%v publish errors for an oversized state, want none", v)
		}
	}
}

package watcher

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// failingOnce refuses, before sending it, the first publish on subj after it
// is armed, as a connection that drops for one message does.
type failingOnce struct {
	js    jetstream.JetStream
	subj  string
	armed atomic.Bool
}

func (p *failingOnce) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if msg.Subject == p.subj && p.armed.CompareAndSwap(true, false) {
		return nil, nats.ErrReconnectBufExceeded
	}
	return p.js.PublishMsgAsync(msg, opts...)
}

// TestReplacedPodsDepartureSurvivesAFailedPublish: a StatefulSet pod evicted
// during a drain is re-created under the same name with a new uid, and the
// first publish of the new pod fails. The evicted pod's departure counts once,
// as an eviction (the cordon actor's streak goes on), the new pod is no
// departure of its own (it never counted on the drained node), and the
// watcher forgets the departed uid.
func TestReplacedPodsDepartureSurvivesAFailedPublish(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodeName string // where the new pod counts: "" while Pending
	}{
		{"re-created Pending", ""},
		{"re-created on another node", "n2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub := &failingOnce{subj: subject.Pod("c", "ns", "web-0")}
			var web0 *corev1.Pod
			f := setupWith(t, func(s *source) {
				s.nodes = append(s.nodes, s.node("n1"), s.node("n2"))
				web0 = s.pod("ns", "web-0", "n1")
				s.pods = append(s.pods, web0, s.pod("ns", "other", "n1"))
			}, func(js jetstream.JetStream) AsyncPublisher { pub.js = js; return pub },
				func(o *Options) { o.RetryMax = 20 * time.Millisecond })
			f.eventually("initial state", func() bool { return f.nodePods("n1") == 2 })

			evicting := evictedBy(f, web0)
			f.src.podW.Modify(evicting)
			f.eventually("web-0 evicting", func() bool { return f.node("n1").Evicting == 1 })

			pub.armed.Store(true)
			again := web0.DeepCopy()
			again.UID = types.UID("uid-ns-web-0-again")
			again.ResourceVersion = f.src.nextRV()
			again.Spec.NodeName = tc.nodeName
			again.Status = corev1.PodStatus{Phase: corev1.PodPending}
			f.src.podW.Modify(again)
			f.eventually("the new web-0 stored after its failed publish", func() bool {
				var s events.PodState
				f.w.mu.Lock()
				rec, _ := f.w.published.get(podPrefix + "ns/web-0")
				f.w.mu.Unlock()
				return !pub.armed.Load() && f.last(pub.subj, &s) && s.UID == "uid-ns-web-0-again" && !rec.doubt
			})
			f.eventually("n1 recounted with every departure the watcher counted", func() bool {
				f.w.mu.Lock()
				all := f.w.left["n1"].all
				f.w.mu.Unlock()
				n := f.node("n1")
				return f.w.queue().Len() == 0 && n.Pods == 1 && n.Departed == all
			})
			if n := f.node("n1"); n.Departed != 1 || n.DepartedEvicted != 1 || n.EvictionStreak != 1 {
				t.Fatalf("n1's departures %d (evicted %d, streak %d), want 1 (1, 1): the new pod counted as a departure",
					n.Departed, n.DepartedEvicted, n.EvictionStreak)
			}
			f.w.mu.Lock()
			leaving, onN1 := len(f.w.leaving), f.w.onNode["n1"]
			f.w.mu.Unlock()
			if leaving != 0 || onN1 != 1 {
				t.Fatalf("watcher holds %d departing uids and counts %d pods on n1, want 0 and 1", leaving, onN1)
			}
		})
	}
}

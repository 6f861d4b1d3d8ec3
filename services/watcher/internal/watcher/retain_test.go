package watcher

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opswire/opswire/services/watcher/internal/compact"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// cachedPod is a weak pointer to the cached pod of ns/name, the start of its
// one-block allocation (compact.PodTransform), so it goes nil only when
// nothing points into the block: not its uid either.
func (f *fixture) cachedPod(key string) weak.Pointer[compact.Pod] {
	f.t.Helper()
	obj, ok, err := f.w.pods.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		f.t.Fatalf("%s not cached: %v", key, err)
	}
	return weak.Make(obj.(*compact.Pod))
}

// collected polls, collecting garbage, until the block is freed: a moment
// after the sync the informer's handlers may still hold it.
func (f *fixture) collected(what string, p weak.Pointer[compact.Pod]) {
	f.t.Helper()
	testkit.Eventually(f.t, 5*time.Second, what+": the block to be freed", func() bool {
		runtime.GC()
		return p.Value() == nil
	})
}

// TestRecordsDoNotPinOlderPodBlocks: a record kept across an update that
// changes nothing published (an annotation, a readiness flip: the common
// update) must not keep the uid or the name (the record is filed under it)
// of the version it was published from, which lie in that version's block and would keep the whole block (512 bytes and
// its labels) alive beside the one the cache holds. After a delete is
// stored, nothing the watcher keeps may pin the deleted pod's block (what it
// keeps while the tombstone's publish is unacknowledged or failed holds
// copies of the uid; this test does not fail those publishes).
func TestRecordsDoNotPinOlderPodBlocks(t *testing.T) {
	f := setup(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		s.pods = append(s.pods, s.pod("ns", "p1", "n1"))
	})
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 1 })
	older := f.cachedPod("ns/p1")

	cur := f.src.pod("ns", "p1", "n1")
	cur.Annotations = map[string]string{"edited": "yes"} // not published
	f.src.podW.Modify(cur)
	f.eventually("unchanged update counted", func() bool {
		return testutil.ToFloat64(f.w.m.unchanged.WithLabelValues("pod")) >= 1
	})
	f.collected("the block of the version the record was published from", older)

	// An update that is published files the record under the new version's
	// name (records.setNamed): the version before is not pinned either.
	older = f.cachedPod("ns/p1")
	upserts := testutil.ToFloat64(f.w.m.published.WithLabelValues("pod", "upsert"))
	cur = f.src.pod("ns", "p1", "n1")
	cur.Labels = map[string]string{compact.PodLabelPrefix + "edited": "yes"} // published
	f.src.podW.Modify(cur)
	f.eventually("changed update published", func() bool {
		return testutil.ToFloat64(f.w.m.published.WithLabelValues("pod", "upsert")) > upserts
	})
	f.collected("the block of the version published before", older)

	newer := f.cachedPod("ns/p1")
	f.src.podW.Delete(cur)
	f.eventually("tombstone", func() bool {
		var s events.PodState
		return f.last(subject.Pod("c", "ns", "p1"), &s) && s.Op == events.OpDelete && s.UID == "uid-ns-p1"
	})
	f.eventually("departure recorded", func() bool { return f.nodePods("n1") == 0 })
	f.collected("the deleted pod's block", newer)
}

// A tombstone whose publish fails: the doubt record markDoubt keeps must not
// hold the uid string of the deleted pod's cached block (review of 1e0a820).
func TestFailedTombstoneDoesNotPinThePodBlock(t *testing.T) {
	pub := &timingOut{}
	f := setupWith(t, func(s *source) {
		s.nodes = append(s.nodes, s.node("n1"))
		s.pods = append(s.pods, s.pod("ns", "p1", "n1"))
	}, func(js jetstream.JetStream) AsyncPublisher { pub.js = js; return pub }, nil)
	f.eventually("initial state", func() bool { return f.nodePods("n1") == 1 })
	blk := f.cachedPod("ns/p1")
	errs := testutil.ToFloat64(f.w.m.errors.WithLabelValues("pod"))
	pub.lying.Store(true)
	f.src.podW.Delete(f.src.pod("ns", "p1", "n1"))
	f.eventually("tombstone publish failed", func() bool {
		return testutil.ToFloat64(f.w.m.errors.WithLabelValues("pod")) > errs
	})
	f.collected("the deleted pod's block while its tombstone is in doubt", blk)
}

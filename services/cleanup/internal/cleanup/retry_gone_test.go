package cleanup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/events"
)

// A retry answered 404 within the horizon of this leader's own earlier
// write (in doubt, a DELETE's 409 after its mark, a finalizer patch that went
// through) is that write's removal: published by this leader, judged at the
// retry's send time and kept through the mirror's news of the pod leaving.
// A new leader's recovery takes an attempt for answered only when every
// attempt of its outcome id is (actuate.LatestAttempts).

// nextLeaderHappened is what a new leader's recovery concludes about the
// removal journaled in in: the latest attempt's intent as the recovery
// folds the intents and answer records (actuate.LatestAttempts), checked by
// a fresh actuator's Happened.
func nextLeaderHappened(t *testing.T, r *actuatorRig, in *actuatetest.Journal, now *time.Time) bool {
	t.Helper()
	if len(in.Msgs) == 0 {
		t.Fatal("no intent journaled")
	}
	var stored []actuate.StoredIntent
	for _, m := range append(append([]*nats.Msg{}, in.Msgs...), in.Answers...) {
		stored = append(stored, actuate.StoredIntent{Intent: decodeIntent(t, m)})
	}
	latest := actuate.LatestAttempts(stored)[0].Intent
	*now = now.Add(5 * time.Second)
	act2 := NewActuator(r.client, &actuatetest.Publisher{}, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
		Now: func() time.Time { return *now }, WindowNow: func() time.Time { return *now },
	})
	ok, err := act2.Happened(context.Background(), latest)
	if err != nil {
		t.Fatalf("leader 2's Happened(%+v): %v", latest, err)
	}
	return ok
}

// removalPublished reports whether leader 1 published the removal (verb).
func removalPublished(r *actuatorRig, verb string) bool {
	for _, m := range r.pub.All() {
		if strings.Contains(m.Subject, ".cleanup."+verb+".") {
			return true
		}
	}
	return false
}

// mustAudit fails unless leader 1 or the next leader audits the removal.
func mustAudit(t *testing.T, r *actuatorRig, in *actuatetest.Journal, now *time.Time, verb string) {
	t.Helper()
	if removalPublished(r, verb) {
		return
	}
	var why []string
	for _, m := range in.Answers {
		why = append(why, decodeIntent(t, m).Answered)
	}
	if !nextLeaderHappened(t, r, in, now) {
		t.Fatalf("this removal is opswire's, yet leader 1 published no %s and the next leader's recovery takes it for not happened "+
			"(%d intents, answer records %q): never audited, not counted", verb, len(in.Msgs), why)
	}
}

// TestACommittedFinalizerPatchThenAThrottledDeleteIsOurRemoval: a pod stuck
// Terminating (grace 30, so the PATCH does not delete it) with a finalizer.
// Leader 1's finalizer PATCH commits; its DELETE is throttled (429) and the
// answer record "throttled" is stored. The pod then goes (the deletion the
// patch unblocked finishes). A write of the attempt committed, so the next
// leader's recovery must take the removal for opswire's: answered intents are
// not "did not happen" when another write of the attempt committed.
func TestACommittedFinalizerPatchThenAThrottledDeleteIsOurRemoval(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	r, in, now := answerRig(t, p, true, livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }))
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewTooManyRequests("slow down", 1)
	})
	grace := int64(30)
	state := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers, s.DeletionGracePeriodSeconds = 1, &grace })
	d := p.Decide(state, Facts{Now: t0})
	if d.Action != ForceDelete || !d.RemoveFinalizers {
		t.Fatalf("decision %+v", d)
	}
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	o, err := r.client.Tracker().Get(podsGVR, "apps", "web-1")
	if err != nil || len(o.(*corev1.Pod).Finalizers) != 0 {
		t.Fatalf("setup: the finalizer PATCH should have committed: %v %v", o, err)
	}
	// The pod goes: the deletion the patch unblocked completes.
	if err := r.client.Tracker().Delete(podsGVR, "apps", "web-1"); err != nil {
		t.Fatal(err)
	}
	mustAudit(t, r, in, now, VerbForceDeleted)
}

// TestARetryAnsweredGoneAfterOurCommittedFinalizerPatchIsOurRemoval: as
// TestACommittedFinalizerPatchThenAThrottledDeleteIsOurRemoval, and leader
// 1's retry (attempt 2, same outcome id) re-reads the pod still there; its
// DELETE is answered 404 because the deletion the first attempt's patch
// unblocked finished in between. The 404 falls within the horizon of this
// leader's committed patch, so leader 1 publishes forcedeleted as its own,
// stores no answer record, and the next leader agrees.
func TestARetryAnsweredGoneAfterOurCommittedFinalizerPatchIsOurRemoval(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	r, in, now := answerRig(t, p, true, livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }))
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes == 1 {
			return true, nil, apierrors.NewTooManyRequests("slow down", 1)
		}
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1")
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-1")
	})
	grace := int64(30)
	state := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers, s.DeletionGracePeriodSeconds = 1, &grace })
	_, _ = r.act.Handle(context.Background(), state, p.Decide(state, Facts{Now: t0}), Facts{Now: t0})
	*now = t0.Add(2 * time.Second) // the retry
	state2 := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.DeletionGracePeriodSeconds = &grace })
	_, _ = r.act.Handle(context.Background(), state2, p.Decide(state2, Facts{Now: *now}), Facts{Now: *now})
	if deletes != 2 || len(in.Msgs) != 2 {
		t.Fatalf("setup: %d DELETEs, %d intents; want 2 and 2", deletes, len(in.Msgs))
	}
	if !removalPublished(r, VerbForceDeleted) || len(in.Answers) != 0 {
		t.Errorf("leader 1 published %v and stored %d answer records; want its own forcedeleted (the retry's 404 within the horizon of its committed patch), no record",
			opsIDs(r), len(in.Answers))
	}
	mustAudit(t, r, in, now, VerbForceDeleted)
}

// TestARetryAnsweredGoneAfterOurMarked409IsOurRemoval: leader 1's DELETE of
// an Evicted pod commits its deletion mark (grace 0) and is then answered 409
// by its second storage step. The 409 is in doubt; the next visit's settling
// read sees our mark and sends the DELETE again, and its 404 (the kubelet
// finished the deletion ours began) is this removal: published once, one
// slot, two DELETEs, no answer record.
func TestARetryAnsweredGoneAfterOurMarked409IsOurRemoval(t *testing.T) {
	r, in, now := answerRig(t, testPolicy(), true, livePod())
	gr := schema.GroupResource{Resource: "pods"}
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes == 1 {
			o, _ := r.client.Tracker().Get(podsGVR, "apps", "web-1")
			cur := o.(*corev1.Pod).DeepCopy()
			ts, zero := metav1.NewTime(t0), int64(0)
			cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds, cur.ResourceVersion = &ts, &zero, "8"
			_ = r.client.Tracker().Update(podsGVR, cur, "apps")
			return true, nil, apierrors.NewConflict(gr, "web-1", errors409)
		}
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1") // the kubelet finished first
		return true, nil, apierrors.NewNotFound(gr, "web-1")
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	if out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); err != nil || !out.Retry || len(r.pub.All()) != 0 {
		t.Fatalf("the 409: %+v, %v, OPS %v; want in doubt: looked at again, nothing published", out, err, opsIDs(r))
	}
	*now = t0.Add(2 * time.Second)
	zero := int64(0)
	state2 := pod(failed("Evicted"), deleting(t0), func(s *events.PodState) { s.DeletionGracePeriodSeconds = &zero })
	_, _ = r.act.Handle(context.Background(), state2, testPolicy().Decide(state2, Facts{Now: *now}), Facts{Now: *now})
	if !removalPublished(r, VerbDeleted) || len(in.Answers) != 0 || deletes != 2 || r.act.cfg.Limiter.Len(*now) != 1 {
		t.Errorf("leader 1 published %v, stored %d answer records, sent %d DELETEs, holds %d slots; want its own deleted, no record, two DELETEs, one slot",
			opsIDs(r), len(in.Answers), deletes, r.act.cfg.Limiter.Len(*now))
	}
	mustAudit(t, r, in, now, VerbDeleted)
}

var errors409 = errString("the object has been modified")

type errString string

func (e errString) Error() string { return string(e) }

// TestARetryAnsweredGoneIsJudgedAtItsSendTime: an earlier write of the pod in
// doubt may land until t0+60s. The retry's DELETE is sent at t0+55s, within
// that horizon; the earlier write lands while it is on its way and the 404
// comes at t0+61s. The 404 is judged at the retry's send time, so it is
// opswire's removal, not someone else's.
func TestARetryAnsweredGoneIsJudgedAtItsSendTime(t *testing.T) {
	r, in, now := answerRig(t, testPolicy(), true, livePod())
	r.act.doubts.lateUntil("uid-1", t0.Add(time.Minute), t0)
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1") // the earlier write lands
		*now = t0.Add(61 * time.Second)                         // the answer comes past its horizon
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-1")
	})
	*now = t0.Add(55 * time.Second)
	state := pod(failed("Evicted"))
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: *now}), Facts{Now: *now})
	mustAudit(t, r, in, now, VerbDeleted)
}

// TestARetryAnsweredGoneIsOursThoughTheMirrorSawThePodLeave: an earlier write
// of the pod in doubt may land until t0+60s. The retry's DELETE is on its way
// at t0+2s when the earlier write lands; the mirror sees the pod leave and
// the controller calls Forget concurrently with the worker. The DELETE's 404
// is still this removal: Forget does not drop the horizon of a write on its
// way.
func TestARetryAnsweredGoneIsOursThoughTheMirrorSawThePodLeave(t *testing.T) {
	r, in, now := answerRig(t, testPolicy(), true, livePod())
	r.act.doubts.lateUntil("uid-1", t0.Add(time.Minute), t0)
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1") // the earlier write lands
		r.act.Forget("uid-1")                                   // the mirror sees the pod leave
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-1")
	})
	*now = t0.Add(2 * time.Second)
	state := pod(failed("Evicted"))
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: *now}), Facts{Now: *now})
	mustAudit(t, r, in, now, VerbDeleted)
}

package cleanup

import (
	"context"
	"testing"
	"time"

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
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// A DELETE's 409 is settled by the next read (our mark: the removal under
// way; moved on without it: a quiet re-look and the attempt's answer record);
// a write is on its way from before its journal; and the recovery reads back
// at least the late-commit horizon (actuate.Recovery.ReadSpan).

var podsGR = schema.GroupResource{Resource: "pods"}

// TestAnUnmarked409ThenSomeoneElsesRemovalIsNotClaimed: leader 1's DELETE of
// an Evicted pod is answered 409 at its early precondition check (the pod's
// resourceVersion moved, e.g. the pod GC adding its DisruptionTarget
// condition): nothing of ours is stored. The retry re-reads the pod still
// there and not marked for deletion (a deletionTimestamp is never unset, and
// a 409 is a final answer, so the first DELETE never will commit). The other
// party then removes the pod and the retry's DELETE is answered 404: opswire
// publishes nothing and holds no slot.
func TestAnUnmarked409ThenSomeoneElsesRemovalIsNotClaimed(t *testing.T) {
	r, in, now := answerRig(t, testPolicy(), true, livePod())
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes == 1 {
			// someone else's status patch moved the resourceVersion: no mark
			_ = r.client.Tracker().Update(podsGVR, livePod(func(p *corev1.Pod) { p.ResourceVersion = "8" }), "apps")
			return true, nil, apierrors.NewConflict(podsGR, "web-1", errors409)
		}
		// between the retry's re-read (pod unmarked, rv 8) and its DELETE,
		// the other party (pod GC) removes the pod
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1")
		return true, nil, apierrors.NewNotFound(podsGR, "web-1")
	})
	state := pod(failed("Evicted"))
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: t0}), Facts{Now: t0})
	*now = t0.Add(2 * time.Second)
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: *now}), Facts{Now: *now})
	if deletes != 2 || len(in.Msgs) != 2 {
		t.Fatalf("setup: %d DELETEs, %d intents; want 2 and 2", deletes, len(in.Msgs))
	}
	if removalPublished(r, VerbDeleted) {
		t.Errorf("leader 1 published %v: a removal opswire did not do (its 409 DELETE committed no mark, the retry's re-read showed the pod unmarked, someone else removed it)", opsIDs(r))
	}
	if n := r.act.cfg.Limiter.Len(*now); n != 0 {
		t.Errorf("rate window holds %d slots; want 0 (opswire removed nothing)", n)
	}
}

// TestAMarked409ThenGoneBeforeTheRetryReadIsOurRemoval: leader 1's DELETE
// commits its deletion mark (grace 0) and is answered 409; the deletion our
// DELETE began completes before the retry's GET, which answers 404. The pod's
// going is our removal: leader 1 publishes it and keeps its slot, rather than
// leaving it to a next leader within the recovery span.
func TestAMarked409ThenGoneBeforeTheRetryReadIsOurRemoval(t *testing.T) {
	r, in, now := answerRig(t, testPolicy(), true, livePod())
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		o, _ := r.client.Tracker().Get(podsGVR, "apps", "web-1")
		cur := o.(*corev1.Pod).DeepCopy()
		ts, zero := metav1.NewTime(t0), int64(0)
		cur.DeletionTimestamp, cur.DeletionGracePeriodSeconds, cur.ResourceVersion = &ts, &zero, "8"
		_ = r.client.Tracker().Update(podsGVR, cur, "apps")
		return true, nil, apierrors.NewConflict(podsGR, "web-1", errors409)
	})
	state := pod(failed("Evicted"))
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: t0}), Facts{Now: t0})
	// the deletion our DELETE's committed mark began completes
	if err := r.client.Tracker().Delete(podsGVR, "apps", "web-1"); err != nil {
		t.Fatal(err)
	}
	*now = t0.Add(2 * time.Second) // the retry (Outcome.Retry) re-reads: 404
	zero := int64(0)
	state2 := pod(failed("Evicted"), deleting(t0), func(s *events.PodState) { s.DeletionGracePeriodSeconds = &zero })
	_, _ = r.act.Handle(context.Background(), state2, testPolicy().Decide(state2, Facts{Now: *now}), Facts{Now: *now})
	if len(in.Answers) != 0 {
		t.Fatalf("setup: %d answer records", len(in.Answers))
	}
	if !removalPublished(r, VerbDeleted) {
		t.Errorf("leader 1 published %v: its own removal (the 409 DELETE's mark committed, the pod went within its horizon) is not audited by leader 1", opsIDs(r))
	}
	if n := r.act.cfg.Limiter.Len(*now); n != 1 {
		t.Errorf("rate window holds %d slots; want 1 (the removal happened)", n)
	}
}

// TestForgetWhileJournalingKeepsTheEarlierWritesHorizon: an earlier write of
// the pod may land until t0+60s. The retry's re-read still sees the pod;
// while its intent is being journaled (up to the intent timeout, or the
// CleanupIntent Event fallback's API timeout) the earlier write lands and the
// mirror sees the pod leave. Forget must keep the horizon of a write that is
// being journaled, not only of one being sent: the retry's 404 is our
// removal, published by leader 1 with no answer record.
func TestForgetWhileJournalingKeepsTheEarlierWritesHorizon(t *testing.T) {
	r, in, now := answerRig(t, testPolicy(), true, livePod())
	r.act.doubts.lateUntil("uid-1", t0.Add(time.Minute), t0)
	r.act.cfg.Intents = &hookedIntents{Journal: in, onRecord: func() {
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1") // the earlier write lands
		r.act.Forget("uid-1")                                   // the mirror sees the pod leave
	}}
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(podsGR, "web-1")
	})
	*now = t0.Add(2 * time.Second)
	state := pod(failed("Evicted"))
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: *now}), Facts{Now: *now})
	if len(in.Msgs) != 1 {
		t.Fatalf("setup: %d intents", len(in.Msgs))
	}
	if !removalPublished(r, VerbDeleted) || len(in.Answers) != 0 {
		t.Errorf("leader 1 published %v and stored %d answer records; want its own deleted (404 within the horizon of its earlier write), no record",
			opsIDs(r), len(in.Answers))
	}
}

type hookedIntents struct {
	*actuatetest.Journal
	onRecord func()
}

func (h *hookedIntents) Record(ctx context.Context, subj string, ev envelope.Event) bool {
	ok := h.Journal.Record(ctx, subj, ev)
	if h.onRecord != nil {
		h.onRecord()
		h.onRecord = nil
	}
	return ok
}

// TestRecoverySpanCoversTheLateCommitHorizon: kube.serverRequestTimeout may
// be up to 10m, which makes cleanup's late-commit horizon 10s+10m+20s, longer
// than the default recovery span. An intent older than the span is not read
// by a new leader, yet its write may still commit after the recovery: the
// span must cover the horizon.
func TestRecoverySpanCoversTheLateCommitHorizon(t *testing.T) {
	act := NewActuator(nil, &actuatetest.Publisher{}, record.NewFakeRecorder(1), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute), ServerRequestTimeout: 10 * time.Minute,
	})
	span := act.Recovery().ReadSpan(time.Minute)
	if span < act.horizon() {
		t.Errorf("recovery span %v < late-commit horizon %v (serverRequestTimeout 10m, which the config accepts): an intent just past the span may still commit unseen", span, act.horizon())
	}
}

// TestTheNextLeaderDecidesAtOnceAfterAnUnmarked409ThenARefusal: attempt 1's
// DELETE is answered 409 at its precondition check (the pod changed; nothing
// stored); the retry, attempt 2 with the same outcome id, is refused by an
// admission webhook (403) and stores its answer record. The retry's re-read
// showed the pod unmarked, so nothing of attempt 1 can land any more and it
// gets an answer record too: a next leader finding the pod unmarked decides
// "did not happen" at once instead of waiting out attempt 2's horizon on
// every takeover while the webhook keeps refusing
// (TestRecoveryAfterAnsweredRefusal).
func TestTheNextLeaderDecidesAtOnceAfterAnUnmarked409ThenARefusal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry func(a *Actuator) time.Duration // the retry's time after t0
	}{
		// The usual retry (Outcome.Retry, a short backoff): doubts.late of
		// the 409 keeps attempt 2 from storing its record at all.
		{"retry at once", func(*Actuator) time.Duration { return 2 * time.Second }},
		// A retry past the 409's horizon stores its record, and
		// LatestAttempts ignores it.
		{"retry past the 409's horizon", func(a *Actuator) time.Duration { return a.horizon() + time.Second }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, in, now := answerRig(t, testPolicy(), true, livePod())
			deletes := 0
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				deletes++
				if deletes == 1 {
					_ = r.client.Tracker().Update(podsGVR, livePod(func(p *corev1.Pod) { p.ResourceVersion = "8" }), "apps")
					return true, nil, apierrors.NewConflict(podsGR, "web-1", errors409)
				}
				return true, nil, apierrors.NewForbidden(podsGR, "web-1", errString("admission webhook denied the request"))
			})
			state := pod(failed("Evicted"))
			_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: t0}), Facts{Now: t0})
			*now = t0.Add(tc.retry(r.act))
			_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: *now}), Facts{Now: *now})
			if deletes != 2 || len(in.Msgs) != 2 {
				t.Fatalf("setup: %d DELETEs, %d intents; want 2, 2", deletes, len(in.Msgs))
			}
			var stored []actuate.StoredIntent
			for _, m := range append(append(in.Msgs[:0:0], in.Msgs...), in.Answers...) {
				stored = append(stored, actuate.StoredIntent{Intent: decodeIntent(t, m)})
			}
			latest := actuate.LatestAttempts(stored)[0].Intent
			*now = now.Add(5 * time.Second) // leader 1's term ends; leader 2
			act2 := NewActuator(r.client, &actuatetest.Publisher{}, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
				Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
				Now: func() time.Time { return *now }, WindowNow: func() time.Time { return *now },
			})
			if ok, err := act2.Happened(context.Background(), latest); ok || err != nil {
				t.Fatalf("leader 2's Happened(latest attempt, answered %q; %d answer records) = %v, %v; want false at once (the 409 committed nothing: the pod is unmarked; attempt 2 answered 403)",
					latest.Answered, len(in.Answers), ok, err)
			}
		})
	}
}

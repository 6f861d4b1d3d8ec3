package cleanup

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A DELETE sent again to finish a removal whose first DELETE committed its
// mark belongs to that removal: the pod gone publishes it, any other answer
// keeps it in doubt (no slot given back, nothing reported), and the removal
// counts from its first DELETE.

// markThen409 makes the first DELETE commit its mark (grace 0, rv 8), the
// pod change again (rv 9) and the removal step answer 409 (secondStep409);
// later DELETEs are handled by then (nil: the fake's own delete).
func markThen409(r *actuatorRig, now *time.Time, then func(n int) (bool, error), base ...func(*corev1.Pod)) *int {
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes == 1 {
			ts, zero := metav1.NewTime(*now), int64(0)
			_ = r.client.Tracker().Update(podsGVR, livePod(append(base, func(p *corev1.Pod) {
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "9"
			})...), "apps")
			return true, nil, secondStep409
		}
		if then == nil {
			return false, nil, nil
		}
		handled, err := then(deletes)
		return handled, nil, err
	})
	return &deletes
}

// TestAResentDelete409KeepsOurRemoval: a pod stuck Terminating (grace 30, its
// node gone) is force-deleted; the first DELETE commits its mark (grace 0,
// deletionTimestamp now, rv 9 after another change) and its removal step is
// answered 409. The DELETE sent again at rv 9 meets the same churn (rv 10);
// on a pod already marked grace 0 the DELETE is one storage step, so its 409
// stored nothing. The removal stays in doubt rather than being dropped: when
// the pod opswire marked leaves, it is published and counted.
func TestAResentDelete409KeepsOurRemoval(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod(liveDeleting))
	deletes := markThen409(r, now, func(n int) (bool, error) {
		if n == 2 {
			_ = r.client.Tracker().Update(podsGVR, livePod(liveDeleting, func(p *corev1.Pod) {
				ts, zero := metav1.NewTime(t0), int64(0)
				p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "10"
			}), "apps")
			return true, apierrors.NewConflict(podsGR, "web-1", errors.New(
				"StorageError: invalid object, Code: 4, Key: /registry/pods/apps/web-1, ResourceVersion: 0, "+
					"AdditionalErrorMsg: Precondition failed: ResourceVersion in precondition: 9, ResourceVersion in object meta: 10"))
		}
		return false, nil
	}, liveDeleting)
	state := pod(deleting(t0.Add(-6 * time.Minute)))
	d := testPolicy().Decide(state, Facts{Now: t0})
	if d.Action != ForceDelete {
		t.Fatalf("setup: decision %+v; want ForceDelete", d)
	}
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	for _, at := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second} {
		*now = t0.Add(at)
		_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	}
	t.Logf("DELETEs sent: %d, published %v, window at 5 s %d", *deletes, opsIDs(r), r.act.cfg.Limiter.Len(*now))
	if *deletes < 2 {
		t.Fatalf("setup: %d DELETEs; want the re-send", *deletes)
	}
	win := r.act.cfg.Limiter.Len(*now)
	// Two minutes later the node's kubelet is back, sees grace 0 and
	// finishes the deletion opswire's force delete began; the mirror sees
	// the pod leave.
	*now = t0.Add(2 * time.Minute)
	_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1")
	r.act.Forget("uid-1")
	if !removalPublished(r, VerbForceDeleted) {
		t.Errorf("published %v after %d DELETEs: the pod opswire's force delete marked grace 0 left, never audited", opsIDs(r), *deletes)
	}
	if win < 1 {
		t.Errorf("rate window held %d slots at 5 s; want 1 (the first DELETE committed its mark)", win)
	}
}

// TestAResentDeleteRefusedKeepsTheSettledSlot: the DELETE sent again is
// refused (403: RBAC changed, a ValidatingAdmissionPolicy on DELETE). The
// first DELETE's mark was stored (the pod is Terminating grace 0 by our
// write), so the removal keeps the slot its first visit settled: a write that
// was in doubt counts.
func TestAResentDeleteRefusedKeepsTheSettledSlot(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := markThen409(r, now, func(int) (bool, error) {
		return true, apierrors.NewForbidden(podsGR, "web-1", errors.New("deletes of pods are not allowed"))
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	if n := r.act.cfg.Limiter.Len(t0); n != 1 {
		t.Fatalf("setup: window holds %d after the first visit; want 1", n)
	}
	*now = t0.Add(time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if *deletes < 2 {
		t.Fatalf("setup: %d DELETEs; want the re-send", *deletes)
	}
	if n := r.act.cfg.Limiter.Len(*now); n != 1 {
		t.Errorf("rate window holds %d slots after the re-sent DELETE was refused; want 1: the first DELETE's mark was stored", n)
	}
}

// TestAResentDeleteCountsFromTheFirstAnswer: the settling read comes late
// (the GETs failing for a while, or Retry's backoff), here 90 s after the
// first DELETE, and the DELETE sent again removes the pod. The removal counts
// in the window from its first DELETE's answer, whose committed mark made the
// pod go, and its outcome Event's action time, which a new leader seeds the
// window from, says the same.
func TestAResentDeleteCountsFromTheFirstAnswer(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := markThen409(r, now, nil)
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	*now = t0.Add(90 * time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if *deletes != 2 || !removalPublished(r, VerbDeleted) {
		t.Fatalf("setup: %d DELETEs, published %v; want the re-send and deleted", *deletes, opsIDs(r))
	}
	per := r.act.cfg.Limiter.Per
	if n := r.act.cfg.Limiter.Len(t0.Add(per - time.Second)); n != 1 {
		t.Errorf("rate window holds %d slots just within a window of the first DELETE; want 1", n)
	}
	recorded := r.eventsSeen()
	if len(recorded) != 1 || !strings.Contains(recorded[0], AnnotationActionTime+":"+actionTime(t0)) {
		t.Errorf("outcome Events %q; want one whose action time is the first DELETE's answer, %s", recorded, actionTime(t0))
	}
}

// TestAResentDeleteWithALostAnswerIsNoFailure: the DELETE sent again loses
// its answer (a 504 "may still be processing"). The removal's first DELETE
// committed its mark and was answered 409, so the settling read past the
// horizon, finding the pod still at the marked version, must not publish a
// critical failed: the removal is finished and published once as deleted.
func TestAResentDeleteWithALostAnswerIsNoFailure(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := markThen409(r, now, func(n int) (bool, error) {
		if n == 2 {
			return true, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
		}
		return false, nil
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	*now = t0.Add(time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if *deletes != 2 {
		t.Fatalf("setup: %d DELETEs; want the re-send", *deletes)
	}
	*now = t0.Add(time.Second + r.act.horizon() + time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if n := countPublished(r, VerbFailed); n != 0 {
		t.Errorf("published %v after %d DELETEs: a critical failed for the removal whose DELETE was answered 409 after its own mark", opsIDs(r), *deletes)
	}
}

package cleanup

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/events"
)

// Only a 409 from the DELETE's second storage step is in doubt
// (kube.DeleteConflictBeforeStore tells the API server's earlier checks; with
// finalizers pending a DELETE is one step); on a pod being deleted only a
// grace cut to 0 is our mark; a 409 is never published as a failure; and a
// 409 after our mark is finished by a DELETE sent again at once.

// conflict409 is the API server's 409 for a DELETE whose precondition failed
// at its first, early check (apiserver v0.37.2 rest.BeforeDelete): nothing
// of the DELETE was stored.
func conflict409(what, want, got, tail string) error {
	return apierrors.NewConflict(podsGR, "web-1",
		fmt.Errorf("the %s in the precondition (%s) does not match the %s in record (%s). %s", what, want, what, got, tail))
}

// earlyConflicts are two 409s to a DELETE that stored nothing: the text of
// the API server's early precondition check, and one that names no
// precondition (the actor cannot tell it from a 409 after its mark, so it
// must be safe for these cases by other rules: finalizers pending make the
// DELETE one step; on a pod being deleted only a grace cut to 0 is our mark;
// a 409 is never a failure).
func earlyConflicts() []struct {
	name string
	err  error
} {
	return []struct {
		name string
		err  error
	}{
		{"early precondition check", conflict409("ResourceVersion", "7", "8", "The object might have been modified")},
		{"a 409 naming no precondition", apierrors.NewConflict(podsGR, "web-1", errString("the object has been modified"))},
	}
}

func countPublished(r *actuatorRig, verb string) int {
	n := 0
	for _, m := range r.pub.All() {
		if strings.Contains(m.Subject, ".cleanup."+verb+".") {
			n++
		}
	}
	return n
}

// TestSomeoneElsesMarkAfterOur409IsNotClaimed: a DELETE of an Evicted pod
// with finalizers (deletionrequested: the finalizers keep the pod) is
// answered 409 because someone else's DELETE (the pod GC, the StatefulSet
// controller, a person) marked the pod between opswire's re-read and its
// DELETE. With finalizers pending the API server's DELETE is a single storage
// step (updateForGracefulDeletionAndFinalizers never deletes immediately with
// pendingFinalizers), so the 409 follows no commit: the other party's mark is
// not published as opswire's and no slot is kept.
func TestSomeoneElsesMarkAfterOur409IsNotClaimed(t *testing.T) {
	for _, c := range earlyConflicts() {
		t.Run(c.name, func(t *testing.T) {
			withFinalizer := func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }
			r, _, now := answerRig(t, testPolicy(), true, livePod(withFinalizer))
			deletes := 0
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				deletes++
				// someone else's DELETE came first: the pod is marked (grace 0, a
				// Failed pod), the finalizer keeps it; opswire's precondition (rv 7)
				// fails at once.
				ts, zero := metav1.NewTime(t0), int64(0)
				_ = r.client.Tracker().Update(podsGVR, livePod(withFinalizer, func(p *corev1.Pod) {
					p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "8"
				}), "apps")
				return true, nil, c.err
			})
			state := pod(failed("Evicted"), func(p *events.PodState) { p.Finalizers = 1 })
			d := testPolicy().Decide(state, Facts{Now: t0})
			if d.Action != Delete || !d.Remains {
				t.Fatalf("setup: decision %+v; want a Delete that remains (deletionrequested)", d)
			}
			_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
			*now = t0.Add(time.Second) // the 409's Retry: the next visit
			_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
			if deletes != 1 {
				t.Fatalf("setup: %d DELETEs, want 1", deletes)
			}
			if removalPublished(r, VerbDeletionRequested) {
				t.Errorf("leader 1 published %v: a deletion requested by someone else (its own DELETE was answered 409, which with finalizers pending can follow no commit) claimed as opswire's", opsIDs(r))
			}
			if n := r.act.cfg.Limiter.Len(*now); n != 0 {
				t.Errorf("rate window holds %d slots; want 0 (opswire wrote nothing)", n)
			}
		})
	}
}

// TestAPodRecreatedUnderItsNameAfterOur409IsNotClaimed: someone else (an
// operator that names its pods, as the StatefulSet controller does) deletes
// the Evicted pod and recreates web-1 at once with a new UID; opswire's
// DELETE of the old UID is answered 409 "the UID in the precondition (uid-1)
// does not match the UID in record (uid-2)", BeforeDelete's early check,
// before any storage step. opswire removed nothing: nothing is published and
// no slot is kept.
func TestAPodRecreatedUnderItsNameAfterOur409IsNotClaimed(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1")
		_ = r.client.Tracker().Create(podsGVR, livePod(func(p *corev1.Pod) {
			p.UID, p.ResourceVersion, p.Status = types.UID("uid-2"), "9", corev1.PodStatus{Phase: corev1.PodPending}
		}), "apps")
		return true, nil, conflict409("UID", "uid-1", "uid-2", "The object might have been deleted and then recreated")
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	*now = t0.Add(time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if deletes != 1 {
		t.Fatalf("setup: %d DELETEs, want 1", deletes)
	}
	if removalPublished(r, VerbDeleted) {
		t.Errorf("leader 1 published %v: someone else's removal (opswire's DELETE met another UID: 409 before any storage step) claimed as opswire's", opsIDs(r))
	}
	if n := r.act.cfg.Limiter.Len(*now); n != 0 {
		t.Errorf("rate window holds %d slots; want 0 (opswire removed nothing)", n)
	}
}

// TestSomeoneElsesGraceAfterOurForceDelete409IsForceDeletedAgain: a pod stuck
// Terminating (grace 30, its node gone); opswire's force delete (grace 0) is
// answered 409 because someone else shortened the grace period meanwhile
// (kubectl delete or drain --grace-period=10 on the dead node's pods).
// opswire's own mark on a pod being deleted is always grace 0, so a grace
// changed to anything else is not ours: the pod is force-deleted again at
// once, and no failed is published.
func TestSomeoneElsesGraceAfterOurForceDelete409IsForceDeletedAgain(t *testing.T) {
	for _, c := range earlyConflicts() {
		t.Run(c.name, func(t *testing.T) {
			r, _, now := answerRig(t, testPolicy(), true, livePod(liveDeleting))
			deletes := 0
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				deletes++
				if deletes > 1 {
					return false, nil, nil // the retry's force delete goes through
				}
				// BeforeDelete shortens a pending grace period by moving the
				// deletionTimestamp back: old - 30 s + 10 s.
				ts, ten := metav1.NewTime(t0.Add(-6*time.Minute-20*time.Second)), int64(10)
				_ = r.client.Tracker().Update(podsGVR, livePod(liveDeleting, func(p *corev1.Pod) {
					p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &ten, "8"
				}), "apps")
				return true, nil, c.err
			})
			state := pod(deleting(t0.Add(-6 * time.Minute)))
			d := testPolicy().Decide(state, Facts{Now: t0})
			if d.Action != ForceDelete {
				t.Fatalf("setup: decision %+v; want ForceDelete", d)
			}
			_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
			*now = t0.Add(2 * time.Second)
			_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
			if deletes < 2 {
				t.Errorf("2 s after the 409, %d DELETE(s): the pod is held in doubt (by someone else's grace period) instead of being force-deleted again", deletes)
			}
			*now = t0.Add(r.act.horizon() + time.Second)
			_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
			if n := countPublished(r, VerbFailed); n != 0 {
				t.Errorf("published %v: a failed for a force delete answered 409", opsIDs(r))
			}
		})
	}
}

// TestA409WithFinalizersPendingIsNoFailureWhenTheDoubtsAreFull: as
// TestSomeoneElsesMarkAfterOur409IsNotClaimed's 409 (any 409 of a pod with
// finalizers pending stores nothing), with the memory of writes in doubt full
// (an API server in trouble: 4096 writes whose answers were lost). The 409 is
// still no failure, takes no slot, and leaves no horizon in which a retry's
// 404 would be claimed as opswire's.
func TestA409WithFinalizersPendingIsNoFailureWhenTheDoubtsAreFull(t *testing.T) {
	for _, c := range earlyConflicts() {
		t.Run(c.name, func(t *testing.T) {
			withFinalizer := func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }
			r, _, now := answerRig(t, testPolicy(), true, livePod(withFinalizer))
			fillDoubts(r)
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				_ = r.client.Tracker().Update(podsGVR, livePod(withFinalizer, func(p *corev1.Pod) { p.ResourceVersion = "8" }), "apps")
				return true, nil, c.err
			})
			state := pod(failed("Evicted"), func(p *events.PodState) { p.Finalizers = 1 })
			d := testPolicy().Decide(state, Facts{Now: t0})
			_, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
			if n := countPublished(r, VerbFailed); n != 0 {
				t.Errorf("published %v (err %v): a critical failed for a 409", opsIDs(r), err)
			}
			if n := r.act.cfg.Limiter.Len(*now); n != 0 {
				t.Errorf("rate window holds %d slots; want 0 (a 409 with finalizers pending stored nothing)", n)
			}
			if r.act.doubts.mayLand("uid-1", *now) {
				t.Errorf("doubts.late holds uid-1: a retry's 404 within the horizon would be claimed as opswire's removal")
			}
		})
	}
}

// TestOurOwnMarkAfterA409IsFinishedWithoutAFailure: opswire's DELETE of an
// Evicted pod commits its mark (grace 0) and is answered 409 (the pod changed
// before the removal step); nobody finishes the deletion (the node's kubelet
// is away). The settling read sees opswire's own mark and the DELETE is sent
// again at once to finish the removal: no critical failed for a removal
// opswire began and then finished.
func TestOurOwnMarkAfterA409IsFinishedWithoutAFailure(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes > 1 {
			return false, nil, nil
		}
		ts, zero := metav1.NewTime(t0), int64(0)
		_ = r.client.Tracker().Update(podsGVR, livePod(func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "8"
		}), "apps")
		return true, nil, apierrors.NewConflict(podsGR, "web-1", errors409)
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	for _, at := range []time.Duration{0, 2 * time.Second, 10 * time.Second, r.act.horizon() + time.Second} {
		*now = t0.Add(at)
		_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	}
	if n := countPublished(r, VerbFailed); n != 0 {
		t.Errorf("published %v after %d DELETEs: a critical failed for a removal opswire began (its own mark) and then finished", opsIDs(r), deletes)
	}
}

// TestJudgeOwnMarkOnATerminatingPod: on a pod already being deleted, the
// mark of our force delete is its grace period cut to 0; a grace changed to
// anything else is someone else's, and the pod moved on without our write.
func TestJudgeOwnMarkOnATerminatingPod(t *testing.T) {
	r := newRig(t, testPolicy(), false, nil, livePod(liveDeleting))
	thirty := int64(30)
	w := &errInDoubt{op: opDelete, rv: "7", sent: t0, deleting: true, grace: &thirty, conflict: true}
	rm := &removal{state: pod(deleting(t0.Add(-6 * time.Minute))), verb: VerbForceDeleted}
	for _, tc := range []struct {
		grace int64
		want  verdict
		why   string
	}{
		{0, stillInDoubt, markedByIt},
		{10, notHappened, changedWithout},
	} {
		live := livePod(liveDeleting, func(p *corev1.Pod) { p.DeletionGracePeriodSeconds, p.ResourceVersion = &tc.grace, "8" })
		if v, why := r.act.judge(rm, w, live); v != tc.want || why != tc.why {
			t.Errorf("grace 30 → %d: judge = %v %q, want %v %q", tc.grace, v, why, tc.want, tc.why)
		}
	}
}

// TestConflictUntrackedIsNoFailure: a DELETE answered 409 after its mark may
// have committed, with the memory of writes in doubt full: kept as a write
// that may still land (a retry's 404 is this removal), never published as a
// failure (the 409 answered; the removal may be under way).
func TestConflictUntrackedIsNoFailure(t *testing.T) {
	r, _, _ := answerRig(t, testPolicy(), true, livePod())
	fillDoubts(r)
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(podsGR, "web-1", errString("the object has been modified"))
	})
	state := pod(failed("Evicted"))
	_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: t0}), Facts{Now: t0})
	if n := countPublished(r, VerbFailed); n != 0 {
		t.Errorf("published %v: a failed for a DELETE answered 409", opsIDs(r))
	}
	if !r.act.doubts.mayLand("uid-1", t0) {
		t.Error("the 409 DELETE is not remembered as one that may still land")
	}
}

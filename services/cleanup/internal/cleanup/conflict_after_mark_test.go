package cleanup

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kube"
)

// A 409 in doubt is judged without the late-commit horizon (answered:
// nothing lands later; the pod at the version sent got nothing), and a 409
// after our mark is finished within the same removal by its DELETE sent
// again at once, not handed back to a re-decision.

// secondStep409 is the API server's 409 (apiserver v0.37.2) from a DELETE's
// second storage step, Storage.Delete, whose resourceVersion precondition
// Store.Delete moved to that of the mark it had just committed (8); the pod
// changed again since (9). storage.Preconditions.Check's text, wrapped in a
// StorageError by storeerr.InterpretDeleteError.
var secondStep409 = apierrors.NewConflict(podsGR, "web-1", errors.New(
	"StorageError: invalid object, Code: 4, Key: /registry/pods/apps/web-1, ResourceVersion: 0, "+
		"AdditionalErrorMsg: Precondition failed: ResourceVersion in precondition: 8, ResourceVersion in object meta: 9"))

// TestAForceDelete409AfterOurMarkIsSentAgain: a pod stuck Terminating (grace
// 30, its node gone). opswire's force delete (grace 0, rv 7) commits its
// first step: rest.BeforeDelete cuts the grace to 0 and moves the
// deletionTimestamp to now. The second step is answered 409 (the pod changed
// in between). The settling read sees opswire's mark and the removal sends
// the DELETE again within the same removal, rather than handing the pod back
// to a re-decision whose stuck-Terminating rule would wait terminatingTimeout
// again on the moved deletionTimestamp. When the pod leaves, leader 1
// publishes it and counts one slot.
func TestAForceDelete409AfterOurMarkIsSentAgain(t *testing.T) {
	if kube.DeleteConflictBeforeStore(secondStep409, "7") {
		t.Fatal("setup: the second step's 409 is taken for before-store")
	}
	r, _, now := answerRig(t, testPolicy(), true, livePod(liveDeleting))
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes > 1 {
			return false, nil, nil // a DELETE sent again goes through
		}
		// the mark (BeforeDelete: the deletionTimestamp moved to now, grace
		// 0), committed as rv 8; the pod changed again (rv 9) before the
		// removal step.
		ts, zero := metav1.NewTime(*now), int64(0)
		_ = r.client.Tracker().Update(podsGVR, livePod(liveDeleting, func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "9"
		}), "apps")
		return true, nil, secondStep409
	})
	state := pod(deleting(t0.Add(-6 * time.Minute)))
	d := testPolicy().Decide(state, Facts{Now: t0})
	if d.Action != ForceDelete {
		t.Fatalf("setup: decision %+v; want ForceDelete", d)
	}
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	*now = t0.Add(time.Second) // the 409's Retry: the next visit (the mirror not yet updated)
	out, err := r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if deletes < 2 {
		t.Errorf("after the 409 from the DELETE's removal step, the settling visit (%+v, %v) sent no DELETE again: "+
			"resolve handed the pod back, but the live re-check Waits terminatingTimeout from the deletionTimestamp the grace cut moved to now", out, err)
	}
	if deletes >= 2 {
		return
	}
	// Two minutes later the node's kubelet is back, sees grace 0 and
	// finishes the deletion opswire's force delete began.
	*now = t0.Add(2 * time.Minute)
	if err := r.client.Tracker().Delete(podsGVR, "apps", "web-1"); err != nil {
		t.Fatal(err)
	}
	r.act.Forget("uid-1") // the mirror sees the pod leave
	if !removalPublished(r, VerbForceDeleted) {
		t.Errorf("published %v: the pod opswire's force delete marked grace 0 left, and leader 1 never audited it", opsIDs(r))
	}
	if n := r.act.cfg.Limiter.Len(*now); n != 1 {
		t.Errorf("rate window holds %d slots; want 1 (opswire's force delete committed its mark)", n)
	}
}

// TestADelete409AfterOurMarkSettledPastTheHorizonIsNoFailure: opswire's
// DELETE of an Evicted pod commits its mark (grace 0) and its removal step is
// answered 409. The first settling read that succeeds comes after the
// late-commit horizon (the settling GETs fail for a while and Retry's backoff
// grows past 90 s). A 409 was answered, so nothing of it can land later and
// the horizon is no reason to change the verdict: the removal is finished and
// published as deleted, never as failed.
func TestADelete409AfterOurMarkSettledPastTheHorizonIsNoFailure(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes > 1 {
			return false, nil, nil
		}
		ts, zero := metav1.NewTime(*now), int64(0)
		_ = r.client.Tracker().Update(podsGVR, livePod(func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "9"
		}), "apps")
		return true, nil, secondStep409
	})
	getFails := false
	r.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if getFails {
			return true, nil, apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return false, nil, nil
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	getFails = true
	for _, at := range []time.Duration{time.Second, 5 * time.Second, 30 * time.Second} {
		*now = t0.Add(at)
		_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	}
	getFails = false
	*now = t0.Add(r.act.horizon() + time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if n := countPublished(r, VerbFailed); n != 0 {
		t.Errorf("published %v after %d DELETEs: a critical failed for a DELETE answered 409 after its own mark (then deleted)", opsIDs(r), deletes)
	}
	if !removalPublished(r, VerbDeleted) {
		t.Errorf("published %v after %d DELETEs: want the removal's deleted", opsIDs(r), deletes)
	}
}

// TestA409LeavingTheResourceVersionUnchangedIsNotHeldInDoubt: a DELETE
// answered 409 with a text kube.DeleteConflictBeforeStore does not know (here
// a validating admission webhook denying DELETEs with code 409; any 409 text
// of another API server build) is kept in doubt. The settling reads find the
// pod at the very resourceVersion the DELETE was sent with: no mark committed
// (a mark is a write and moves the resourceVersion), and a 409 was answered,
// so nothing can land later. The doubt is settled at once, without holding
// the pod for the horizon or publishing a critical failed.
func TestA409LeavingTheResourceVersionUnchangedIsNotHeldInDoubt(t *testing.T) {
	denied := apierrors.NewConflict(podsGR, "web-1", errors.New(`admission webhook "guard.example.com" denied the request: backup in progress`))
	if kube.DeleteConflictBeforeStore(denied, "7") {
		t.Fatal("setup: the webhook's 409 is taken for before-store")
	}
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		return true, nil, denied // the pod unchanged: rv 7
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	within := 0
	for _, at := range []time.Duration{0, 2 * time.Second, 10 * time.Second, r.act.horizon() + time.Second} {
		*now = t0.Add(at)
		_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
		if at < r.act.horizon() {
			within = deletes
		}
	}
	if n := countPublished(r, VerbFailed); n != 0 {
		t.Errorf("published %v after %d DELETEs: a critical failed (\"unchanged past the late-commit horizon\") for a DELETE answered 409 that left the pod at its resourceVersion", opsIDs(r), deletes)
	}
	if within < 2 {
		t.Errorf("%d DELETE(s) in the %v horizon (visits at 0, 2 s, 10 s): a 409 that provably stored nothing (resourceVersion unchanged) held the pod in doubt for the whole horizon", within, r.act.horizon())
	}
}

var _ = events.PodState{}

// TestResentDeleteRefusedKeepsTheSlot: a DELETE answered 409 after its
// mark committed; the DELETE sent again to finish the removal is refused (a
// webhook's 403). The mark stands, so the pod is being removed by this
// removal: it keeps its slot in the rate window (a refusal of the second
// DELETE takes nothing back).
func TestResentDeleteRefusedKeepsTheSlot(t *testing.T) {
	r, _, now := answerRig(t, testPolicy(), true, livePod())
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes++
		if deletes > 1 {
			return true, nil, apierrors.NewForbidden(podsGR, "web-1", errors.New("admission webhook denied the request"))
		}
		ts, zero := metav1.NewTime(*now), int64(0)
		_ = r.client.Tracker().Update(podsGVR, livePod(func(p *corev1.Pod) {
			p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &zero, "9"
		}), "apps")
		return true, nil, secondStep409
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	*now = t0.Add(time.Second)
	_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now})
	if deletes != 2 {
		t.Fatalf("setup: %d DELETEs, want 2", deletes)
	}
	if n := r.act.cfg.Limiter.Len(*now); n != 1 {
		t.Errorf("rate window holds %d slots after the DELETE sent again was refused; want 1 (the first DELETE's mark stands)", n)
	}
}

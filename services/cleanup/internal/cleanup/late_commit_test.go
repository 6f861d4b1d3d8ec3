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
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// again is the wait before the pod's next visit (the controller's first
// backoff for a Retry).
func again(out Outcome) time.Duration {
	if out.Retry {
		return 100 * time.Millisecond
	}
	return out.RequeueAfter
}

// loseFirstDelete makes the first DELETE's answer a 504 (the API server's
// handler goes on), with land run in its place (nil: nothing committed);
// later DELETEs go through. It returns the count of DELETEs sent.
func loseFirstDelete(r *actuatorRig, land func()) *int {
	deletes := 0
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if deletes++; deletes > 1 {
			return false, nil, nil
		}
		if land != nil {
			land()
		}
		return true, nil, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
	})
	return &deletes
}

// markDeleted is what the API server's first step of a DELETE stores (the
// pod marked for deletion, with grace, at a new resourceVersion).
func markDeleted(t *testing.T, r *actuatorRig, grace int64) {
	t.Helper()
	obj, err := r.client.Tracker().Get(podsGVR, "apps", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod).DeepCopy()
	ts := metav1.NewTime(t0.Add(time.Duration(grace) * time.Second))
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds, p.ResourceVersion = &ts, &grace, "8"
	if err := r.client.Tracker().Update(podsGVR, p, "apps"); err != nil {
		t.Fatal(err)
	}
}

// TestActuatorDeleteCommitsAfterSettlingRead: the DELETE's answer is lost
// (the API server's 504: its handler goes on) and its commit lands just
// after the next visit's settling read. The read's "same pod" is no proof
// of "did not happen" (taken for one, the removal would be audited failed,
// never deleted, and not counted): the unchanged pod keeps it in doubt (no retry of
// the write), and the next read finds the pod gone: deleted, once.
func TestActuatorDeleteCommitsAfterSettlingRead(t *testing.T) {
	w := actuate.NewWindow(10, time.Minute)
	r := newRig(t, testPolicy(), false, w, livePod())
	sent := loseFirstDelete(r, nil)
	gets := 0
	r.client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if *sent == 0 {
			return false, nil, nil
		}
		if gets++; gets == 1 { // the settling read is served, then the commit lands
			obj, err := r.client.Tracker().Get(podsGVR, "apps", "web-1")
			if err != nil {
				t.Fatal(err)
			}
			_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1")
			return true, obj, nil
		}
		return false, nil, nil
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	for i := 0; i < 3; i++ {
		out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
		t.Logf("visit %d: %+v %v", i+1, out, err)
	}
	ids := opsIDs(r)
	if strings.Join(ids, ",") != "cleanup/uid-1/deleted" || w.Len(t0) != 1 || r.countDeletes() != 1 {
		t.Errorf("the first DELETE removed the pod; want its deleted audit only, 1 slot, 1 DELETE; got OPS %v, window %d, %d DELETEs",
			ids, w.Len(t0), r.countDeletes())
	}
}

// TestActuatorDeleteInDoubtUntilHorizon: the DELETE's answer is lost and
// it never lands: the pod stays, its resourceVersion unchanged. It stays
// in doubt (nothing published, slot kept, no second DELETE) through
// settling reads that come at doubling waits, the last one exactly at the
// late-commit horizon; then it did not happen: failed once, the slot given
// back, and the retried DELETE removes the pod. The horizon follows the API
// server's request timeout (kube.serverRequestTimeout, 60 s by default).
func TestActuatorDeleteInDoubtUntilHorizon(t *testing.T) {
	for _, tc := range []struct {
		name               string
		set, serverTimeout time.Duration
	}{
		{"default", 0, actuate.DefaultServerRequestTimeout},
		{"API server timeout 120s", 120 * time.Second, 120 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := actuate.NewWindow(10, 10*time.Minute)
			r := newRig(t, testPolicy(), false, w, livePod())
			if tc.set > 0 { // else NewActuator's default
				r.act.cfg.ServerRequestTimeout = tc.set
			}
			now := t0
			r.act.cfg.WindowNow = func() time.Time { return now }
			loseFirstDelete(r, nil)
			state := pod(failed("Evicted"))
			d := testPolicy().Decide(state, Facts{Now: t0})
			horizon := t0.Add(actuate.DefaultAPITimeout + tc.serverTimeout + actuate.LateCommitMargin)
			out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
			visits := 1
			for now.Before(horizon) {
				if err != nil || again(out) <= 0 || len(r.pub.All()) != 0 || w.Len(now) != 1 || r.countDeletes() != 1 {
					t.Fatalf("visit %d at +%s: %+v %v, OPS %v, window %d, %d DELETEs; want in doubt: a visit again, nothing published, the slot kept, 1 DELETE",
						visits, now.Sub(t0), out, err, opsIDs(r), w.Len(now), r.countDeletes())
				}
				if visits > 12 {
					t.Fatalf("%d visits before the horizon: spinning", visits)
				}
				now = now.Add(again(out))
				out, err = r.act.Handle(context.Background(), state, d, Facts{Now: t0})
				visits++
			}
			if !now.Equal(horizon) {
				t.Fatalf("the last settling read came at +%s, want at the horizon +%s", now.Sub(t0), horizon.Sub(t0))
			}
			ids := opsIDs(r)
			t.Logf("%d visits; OPS %v, window %d, %d DELETEs", visits, ids, w.Len(now), r.countDeletes())
			if err != nil || out != (Outcome{}) || strings.Join(ids, ",") != "cleanup/uid-1/failed/delete,cleanup/uid-1/deleted" ||
				w.Len(now) != 1 || r.countDeletes() != 2 {
				t.Fatalf("at the horizon: %+v %v, OPS %v, window %d, %d DELETEs; want failed then deleted, one slot, two DELETEs",
					out, err, ids, w.Len(now), r.countDeletes())
			}
		})
	}
}

// TestActuatorForceDeleteMarkedInDoubt: the force DELETE's first step (the
// pod marked with grace 0, a new resourceVersion) is stored, its answer
// lost, and the settling read comes before the removal step: the pod's
// resourceVersion moved on, but by this very write, so it stays in doubt;
// the pod then leaves: forcedeleted, once, one DELETE.
func TestActuatorForceDeleteMarkedInDoubt(t *testing.T) {
	w := actuate.NewWindow(10, time.Minute)
	r := newRig(t, testPolicy(), false, w, livePod(liveDeleting))
	loseFirstDelete(r, func() { markDeleted(t, r, 0) })
	state := pod(deleting(t0.Add(-6 * time.Minute)))
	d := testPolicy().Decide(state, Facts{Now: t0})
	for i := 0; i < 2; i++ {
		out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
		if err != nil || again(out) <= 0 || len(r.pub.All()) != 0 {
			t.Fatalf("visit %d: %+v %v, OPS %v; want in doubt", i+1, out, err, opsIDs(r))
		}
	}
	_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1") // the removal step
	r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	if ids := opsIDs(r); strings.Join(ids, ",") != "cleanup/uid-1/forcedeleted" || w.Len(t0) != 1 || r.countDeletes() != 1 {
		t.Fatalf("OPS %v, window %d, %d DELETEs; want forcedeleted once, 1 slot, 1 DELETE", ids, w.Len(t0), r.countDeletes())
	}
}

// TestControllerSettlesDeletionRequestedInDoubt: a deletion requested
// (finalizers keep the pod) whose answer was lost leaves the pod
// Terminating, so its mirrored decision is Wait (terminatingTimeout), which
// never reaches Handle, which would leave the write in doubt until the pod
// left. The controller settles it first: the pod marked
// for deletion by the write is its outcome, published once.
func TestControllerSettlesDeletionRequestedInDoubt(t *testing.T) {
	w := actuate.NewWindow(10, time.Minute)
	withFinalizer := func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }
	r := newRig(t, testPolicy(), false, w, livePod(withFinalizer))
	loseFirstDelete(r, func() { markDeleted(t, r, 0) })
	mirrored := pod(failed("Evicted"), func(p *events.PodState) { p.Finalizers = 1 })
	state := &memState{pods: map[string]*events.PodState{"apps/web-1": mirrored}, nodes: map[string]*events.NodeState{}}
	ctl := NewController(testPolicy(), r.act, r.metrics, time.Hour, 1, func() time.Time { return t0 }, zerolog.Nop())
	ctl.countNodes(state)
	if out, err := ctl.sync(context.Background(), state, "apps/web-1"); err != nil || again(out) <= 0 || len(r.pub.All()) != 0 {
		t.Fatalf("first visit: %+v %v, OPS %v; want in doubt", out, err, opsIDs(r))
	}
	terminating := pod(failed("Evicted"), func(p *events.PodState) {
		ts := t0
		p.Finalizers, p.DeletionTimestamp, p.ResourceVersion = 1, &ts, "8"
	})
	if d := testPolicy().Decide(terminating, Facts{Now: t0}); d.Action != Wait {
		t.Fatalf("the Terminating pod decides %v, want Wait", d.Action)
	}
	state.pods["apps/web-1"] = terminating // the mirror's update
	out, err := ctl.sync(context.Background(), state, "apps/web-1")
	if ids := opsIDs(r); err != nil || strings.Join(ids, ",") != "cleanup/uid-1/deletionrequested" || w.Len(t0) != 1 {
		t.Fatalf("second visit: %+v %v, OPS %v, window %d; want deletionrequested once, 1 slot", out, err, ids, w.Len(t0))
	}
}

// TestDeleteInDoubtAcrossTermEnd: leader 1's DELETE is
// answered 504 and its commit has not landed yet; leader 1 holds it in
// doubt, then its term ends. Leader 2 starts 20 s after the write, inside
// the late-commit horizon. Its recovery asks Happened about the open intent:
// the same pod, unchanged, is no proof within the horizon, so Happened must
// not answer a final false: were the recovery to complete, the commit
// landing at 30 s would leave the removal leader 1 did unpublished (leader
// 2's next visit finds the pod gone, 404 on its re-read).
//
// Recovery is simulated as SeedAndRecover does it: Happened until it answers
// without an error (5 s between attempts); true publishes the intent's
// outcome.
func TestDeleteInDoubtAcrossTermEnd(t *testing.T) {
	r := newRig(t, testPolicy(), false, actuate.NewWindow(10, time.Minute), livePod())
	now := t0
	r.act.cfg.WindowNow = func() time.Time { return now }
	r.act.cfg.Now = func() time.Time { return now }
	in := actuatetest.NewJournal(true)
	r.act.cfg.Intents = in
	loseFirstDelete(r, nil)
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	if err != nil || len(opsIDs(r)) != 0 || len(in.Msgs) != 1 {
		t.Fatalf("leader 1: %+v %v, OPS %v, %d intents; want the DELETE in doubt", out, err, opsIDs(r), len(in.Msgs))
	}
	var intent events.Intent
	if _, err := envelope.Decode(in.Msgs[0].Header, in.Msgs[0].Data, events.TypeIntent, &intent); err != nil {
		t.Fatal(err)
	}
	// Leader 1's term ends. Leader 2, 20 s after the write.
	now = t0.Add(20 * time.Second)
	pub2 := &actuatetest.Publisher{}
	act2 := NewActuator(r.client, pub2, record.NewFakeRecorder(100), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
		Now: func() time.Time { return now }, WindowNow: func() time.Time { return now },
	})
	landed := false
	land := func() {
		if !landed {
			landed = true
			_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1")
		}
	}
	for attempt := 1; ; attempt++ {
		if !now.Before(t0.Add(30 * time.Second)) {
			land()
		}
		happened, err := act2.Happened(context.Background(), intent)
		t.Logf("recovery attempt %d at +%s: Happened = %v, %v", attempt, now.Sub(t0), happened, err)
		if err == nil {
			if happened {
				o := intent.Outcome
				pub2.Publish(o.Subject, envelope.Event{ID: o.ID, Source: o.Source, Type: o.Type, Time: o.Time, Subject: o.Object, Data: o.Data})
			}
			break
		}
		if attempt > 40 {
			t.Fatal("recovery never completes")
		}
		now = now.Add(5 * time.Second)
	}
	if now.Before(t0.Add(30 * time.Second)) {
		now = t0.Add(30 * time.Second)
	}
	land() // leader 1's DELETE commits
	now = now.Add(time.Second)
	out, err = act2.Handle(context.Background(), state, d, Facts{Now: now})
	t.Logf("leader 2's visit: %+v %v", out, err)
	act2.Forget("uid-1") // the mirror saw the pod leave
	var ids []string
	for _, m := range append(r.pub.All(), pub2.All()...) {
		ids = append(ids, m.Subject+" "+m.Header.Get(nats.MsgIdHdr))
	}
	t.Logf("OPS %v; DELETEs sent %d", ids, r.countDeletes())
	deleted := 0
	for _, m := range append(r.pub.All(), pub2.All()...) {
		if m.Header.Get(nats.MsgIdHdr) == "cleanup/uid-1/deleted" {
			deleted++
		}
	}
	if deleted != 1 {
		t.Errorf("leader 1's DELETE removed the pod (late commit), but its deleted audit was published %d times, want once", deleted)
	}
}

package cleanup

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
)

// TestIntentEventInDoubtAcrossTermEnd is TestDeleteInDoubtAcrossTermEnd
// during a NATS outage: leader 1's intent is journaled as a CleanupIntent
// Event (OPS did not store it), its DELETE is answered 504 and has not
// landed yet, and its term ends. Leader 2 starts 20 s after the write and
// reads its recovery's Live actions. LiveActions asks Happened with the
// intent's time, so the unchanged pod within the late-commit horizon is no
// proof of "not happened" (taken for one, the commit landing at 30 s would
// leave the removal leader 1 did unpublished). The recovery retries (as SeedAndRecover does, 5 s apart) until the pod is gone: the
// removal happened, and its outcome is rebuilt and published.
func TestIntentEventInDoubtAcrossTermEnd(t *testing.T) {
	r := newRig(t, testPolicy(), false, actuate.NewWindow(10, time.Minute), livePod())
	now := t0
	r.act.cfg.WindowNow = func() time.Time { return now }
	r.act.cfg.Now = func() time.Time { return now }
	r.act.cfg.Intents = actuatetest.NewJournal(false) // NATS is away
	// The API server sets an Event's creationTimestamp (the fake does not).
	r.client.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.Event).CreationTimestamp = metav1.NewTime(now)
		return false, nil, nil
	})
	loseFirstDelete(r, nil)
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	if err != nil || len(opsIDs(r)) != 0 || len(r.createdEvents()) != 1 {
		t.Fatalf("leader 1: %+v %v, OPS %v, %d Events written; want the DELETE in doubt after its CleanupIntent Event",
			out, err, opsIDs(r), len(r.createdEvents()))
	}
	// Leader 1's term ends. Leader 2, 20 s after the write.
	now = t0.Add(20 * time.Second)
	act2 := NewActuator(r.client, &actuatetest.Publisher{}, record.NewFakeRecorder(100), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
		Now: func() time.Time { return now }, WindowNow: func() time.Time { return now },
	})
	var las []actuate.LiveAction
	for attempt := 1; ; attempt++ {
		if !now.Before(t0.Add(30 * time.Second)) {
			_ = r.client.Tracker().Delete(podsGVR, "apps", "web-1") // leader 1's DELETE commits
		}
		las, err = act2.LiveActions(context.Background(), now.Add(-10*time.Minute))
		t.Logf("recovery attempt %d at +%s: %d live actions, %v", attempt, now.Sub(t0), len(las), err)
		if err == nil {
			break
		}
		if !errors.Is(err, actuate.ErrNotYetDecided) || attempt > 40 {
			t.Fatalf("recovery attempt %d: %v", attempt, err)
		}
		now = now.Add(5 * time.Second)
	}
	if len(las) != 1 || las[0].Pending || las[0].Outcome.ID != "cleanup/uid-1/deleted" {
		t.Fatalf("live actions %v at +%s; want leader 1's removal, happened (its commit lands within the horizon), so its outcome is published",
			liveSummary(las), now.Sub(t0))
	}
}

// TestLiveActionsIntentHorizon: a CleanupIntent Event alone, its pod still
// there, is "not decided yet" (the recovery retries) only within the
// late-commit horizon of its creation, and only when it was created before
// this term started; one created since is Pending at once (Events are not
// authenticated: one written on and on must not hold the recovery for ever).
func TestLiveActionsIntentHorizon(t *testing.T) {
	horizon := actuate.DefaultAPITimeout + actuate.DefaultServerRequestTimeout + actuate.LateCommitMargin // newRig's defaults
	tests := []struct {
		name    string
		created time.Time // the Event's creationTimestamp (the term starts at t0)
		podGone bool
		want    string // "wait", "pending" or "happened"
	}{
		{"before the term, within the horizon", t0.Add(-20 * time.Second), false, "wait"},
		{"before the term, just within the horizon", t0.Add(-horizon + time.Second), false, "wait"},
		{"before the term, past the horizon", t0.Add(-horizon), false, "pending"},
		{"before the term, within the horizon, pod gone", t0.Add(-20 * time.Second), true, "happened"},
		{"since the term started", t0.Add(10 * time.Second), false, "pending"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := journalEv(t, EventIntent, "web-1", "uid-1", tc.created.Add(-time.Second)) // created 1 s after its action time
			objs := []runtime.Object{ev}
			if !tc.podGone {
				objs = append(objs, livePod())
			}
			r := newRig(t, testPolicy(), false, nil, objs...)
			las, err := r.act.LiveActions(context.Background(), t0.Add(-10*time.Minute))
			got := "?"
			switch {
			case errors.Is(err, actuate.ErrNotYetDecided):
				got = "wait"
			case err != nil:
				t.Fatal(err)
			case len(las) == 1 && las[0].Pending:
				got = "pending"
			case len(las) == 1:
				got = "happened"
			}
			if got != tc.want {
				t.Fatalf("LiveActions = %v, %v (%s); want %s", liveSummary(las), err, got, tc.want)
			}
		})
	}
}

// liveSummary renders live actions as "<outcome id>[ pending]".
func liveSummary(las []actuate.LiveAction) []string {
	var out []string
	for _, la := range las {
		s := la.Outcome.ID
		if la.Pending {
			s += " pending"
		}
		out = append(out, s)
	}
	return out
}

// TestActuatorRecovery: the recovery a new leader runs with is this actor's
// (subjects, Happened, Live, the audit) with LateCommit = the late-commit
// horizon, so a removal of the old term that committed late counts in the
// window from the read that showed it, not from its intent (a slot freed up
// to the horizon early otherwise: SeedAndRecover's test shows the rule).
func TestActuatorRecovery(t *testing.T) {
	r := newRig(t, testPolicy(), false, nil)
	rec := r.act.Recovery()
	if rec.LateCommit != r.act.horizon() || rec.LateCommit <= 0 || rec.Happened == nil || rec.Live == nil ||
		rec.Audit == nil || rec.Intents != actuate.IntentSubjects(r.act.cfg.Cluster, Service) || len(rec.Outcomes) != len(ActionSubjects(r.act.cfg.Cluster)) {
		t.Fatalf("recovery %+v: want this actor's subjects, Happened, Live, the audit and LateCommit = the late-commit horizon %s",
			rec, r.act.horizon())
	}
}

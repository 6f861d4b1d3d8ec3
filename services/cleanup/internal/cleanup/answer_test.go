package cleanup

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// TestRecoveryAfterAnsweredRefusal: leader 1's DELETE gets a definite
// answer that it did not happen (409: the pod changed since the re-read;
// 403: an admission webhook denied it; 429: turned away), and its term ends
// before the retry. Its intent has no outcome. Happened cannot tell such a
// write from one whose answer was lost, so without more leader 2 would wait
// the whole late-commit horizon (about 90 s) for a write that was answered,
// on every takeover while a webhook keeps refusing the pod. So leader 1
// stores the attempt's answer record (actuate.NewAnswer), the
// recovery hands Happened the intent marked answered, and the same pod is
// "did not happen" at once. Without the record (not stored) it still waits.
func TestRecoveryAfterAnsweredRefusal(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	tests := []struct {
		name     string
		answer   error
		changed  bool // the pod's resourceVersion moved on (the cause of the 409)
		patch    bool // the answer is the finalizer patch's (removeFinalizers), not the DELETE's
		why      string
		unstored bool // the answer record was not stored
		gone     bool // the answer is the DELETE's 404: someone else removed the pod
	}{
		{"409 conflict of the finalizer patch", apierrors.NewConflict(gr, "web-1", errors.New("the object has been modified")), true, true, "conflict", false, false},
		{"403 denied by admission", apierrors.NewForbidden(gr, "web-1", errors.New("admission webhook denied the request")), false, false, "refused", false, false},
		{"429 throttled", apierrors.NewTooManyRequests("slow down", 1), false, false, "throttled", false, false},
		{"403, its answer record not stored", apierrors.NewForbidden(gr, "web-1", errors.New("denied")), false, false, "refused", true, false},
		// The pod is gone for leader 2 too: the record keeps its absence
		// from being read as this removal (a deleted for a pod opswire did
		// not remove).
		{"404: someone else removed the pod", apierrors.NewNotFound(gr, "web-1"), false, false, "gone", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, live, verb, state := testPolicy(), livePod(), "delete", pod(failed("Evicted"))
			if tc.patch {
				p.RemoveFinalizers, verb = true, "patch"
				live, state = livePod(liveFailedLeftTerminating), stateFailedLeftTerminating()
			}
			r, in, now := answerRig(t, p, true, live)
			r.client.PrependReactor(verb, "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.answer
			})
			d := p.Decide(state, Facts{Now: t0})
			out, _ := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
			if out.Retry == tc.gone || len(in.Msgs) != 1 || r.act.doubts.waiting("uid-1") != nil || len(in.Answers) != 1 {
				t.Fatalf("leader 1: %+v, %d intents, %d answer records; want the write answered, retried unless the pod is gone, nothing in doubt, one answer record",
					out, len(in.Msgs), len(in.Answers))
			}
			if tc.changed {
				if err := r.client.Tracker().Update(podsGVR, livePod(func(p *corev1.Pod) { p.ResourceVersion = "8" }), "apps"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.gone {
				if err := r.client.Tracker().Delete(podsGVR, live.Namespace, live.Name); err != nil {
					t.Fatal(err)
				}
			}
			intent := decodeIntent(t, in.Msgs[0])
			answered := decodeIntent(t, in.Answers[0])
			if answered.Answered != tc.why || !answered.Time.Equal(intent.Time) || answered.Outcome.ID != intent.Outcome.ID ||
				in.Answers[0].Subject != in.Msgs[0].Subject || in.Answers[0].Header.Get(envelope.HeaderID) != in.Msgs[0].Header.Get(envelope.HeaderID)+"/answered" {
				t.Fatalf("answer record %+v on %s (id %s); want the intent's attempt, answered %q, on its subject, id <intent>/answered",
					answered, in.Answers[0].Subject, in.Answers[0].Header.Get(envelope.HeaderID), tc.why)
			}
			// Leader 1's term ends before its retry; leader 2, 5 s later,
			// with the intent as the recovery hands it (merged with its
			// answer record when that was stored).
			*now = t0.Add(5 * time.Second)
			act2 := NewActuator(r.client, &actuatetest.Publisher{}, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
				Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
				Now: func() time.Time { return *now }, WindowNow: func() time.Time { return *now },
			})
			check := intent
			if !tc.unstored {
				check = answered
			}
			happened, err := act2.Happened(context.Background(), check)
			if tc.unstored {
				if !errors.Is(err, actuate.ErrNotYetDecided) {
					t.Fatalf("leader 2's check without the answer record = %v, %v; want not decided yet (within the horizon)", happened, err)
				}
				return
			}
			if err != nil || happened {
				t.Fatalf("leader 2's check of an answered refusal = %v, %v; want false at once (the write was answered: nothing in doubt)", happened, err)
			}
		})
	}
}

// TestAnswerRecordOnlyWhenNothingCanLand: the attempt's answer record is
// stored for a refusal, and for finalizers put back (the pod stays, no
// DELETE); not for a write in doubt, nor for a refusal while an earlier
// write of the pod that was in doubt may still land, nor for an intent OPS
// did not store.
func TestAnswerRecordOnlyWhenNothingCanLand(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	denied := apierrors.NewForbidden(gr, "web-1", errors.New("denied"))
	tests := []struct {
		name        string
		intentKept  bool
		earlierLate bool  // an earlier write of the pod may still land
		deleteErr   error // the DELETE's answer
		want        int   // answer records
	}{
		{"refused", true, false, denied, 1},
		{"refused, an earlier write may land", true, true, denied, 0},
		{"refused, intent not stored in OPS", false, false, denied, 0},
		{"answer lost", true, false, errors.New("connection reset by peer"), 0},
		{"DELETE 409: its first storage step may have committed", true, false, apierrors.NewConflict(gr, "web-1", errors.New("modified")), 0},
		{"404: removed by someone else", true, false, apierrors.NewNotFound(gr, "web-1"), 1},
		{"404, an earlier write may land: this removal, published", true, true, apierrors.NewNotFound(gr, "web-1"), 0},
		{"deleted", true, false, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, in, now := answerRig(t, testPolicy(), tc.intentKept, livePod())
			if tc.earlierLate {
				r.act.doubts.lateUntil("uid-1", now.Add(time.Minute), *now)
			}
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return tc.deleteErr != nil, nil, tc.deleteErr
			})
			state := pod(failed("Evicted"))
			_, _ = r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: t0}), Facts{Now: t0})
			if len(in.Answers) != tc.want {
				t.Fatalf("%d answer records, want %d", len(in.Answers), tc.want)
			}
		})
	}
	t.Run("finalizers put back", func(t *testing.T) {
		p := testPolicy()
		p.RemoveFinalizers = true
		r := newRig(t, p, false, actuate.NewWindow(10, time.Minute), livePod(liveFailedLeftTerminating))
		in := actuatetest.NewJournal(true)
		r.act.cfg.Intents = in
		r.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, livePod(liveFailedLeftTerminating, func(p *corev1.Pod) { p.ResourceVersion = "9" }), nil
		})
		state := stateFailedLeftTerminating()
		_, _ = r.act.Handle(context.Background(), state, p.Decide(state, Facts{Now: t0}), Facts{Now: t0})
		if len(in.Answers) != 1 || decodeIntent(t, in.Answers[0]).Answered != "finalizers kept" {
			t.Fatalf("%d answer records; want one, answered \"finalizers kept\"", len(in.Answers))
		}
	})
}

func decodeIntent(t *testing.T, m *nats.Msg) events.Intent {
	t.Helper()
	var in events.Intent
	if _, err := envelope.Decode(m.Header, m.Data, events.TypeIntent, &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestAnswerRecordNotWhileAForgottenWriteMayLand: answerIntent's
// doubts.certain must not say "nothing can land" for a pod whose earlier
// write in doubt the memory could not keep. With the memory of writes in
// doubt full, a lost answer is reported failed and retried untracked; were
// the retry's 429 to store an answer record, a new leader would take the
// same pod for "did not happen" at once (the record closes the latest
// attempt) while the first DELETE could still commit: unaudited and not
// counted. Likewise a settled write whose entry the full memory of late
// writes dropped, once that memory drained below full.
func TestAnswerRecordNotWhileAForgottenWriteMayLand(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(r *actuatorRig, now time.Time) // before the first visit
		between func(r *actuatorRig, now time.Time) // before the retry (now: its time)
		lost    bool                                // a first visit whose DELETE loses its answer
	}{
		{"doubts full at the lost answer, still full at the retry",
			func(r *actuatorRig, _ time.Time) { fillDoubts(r) }, func(*actuatorRig, time.Time) {}, true},
		{"doubts full at the lost answer, drained before the retry",
			func(r *actuatorRig, _ time.Time) { fillDoubts(r) },
			func(r *actuatorRig, _ time.Time) {
				for uid := range r.act.doubts.m {
					r.act.doubts.answered(uid)
				}
			}, true},
		{"late full when the earlier write settled, drained before the retry",
			func(r *actuatorRig, now time.Time) {
				for i := range maxDoubts {
					r.act.doubts.lateUntil(fmt.Sprintf("other-%d", i), now.Add(time.Second), now)
				}
				// uid-1's earlier write, settled not happened, may land
				// for another minute: not kept (the memory is full).
				r.act.doubts.lateUntil("uid-1", now.Add(time.Minute), now)
			},
			func(r *actuatorRig, now time.Time) {
				// The others expired; a later entry purges them.
				r.act.doubts.lateUntil("other", now.Add(time.Minute), now)
			}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, in, now := answerRig(t, testPolicy(), true, livePod())
			deletes := 0
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				deletes++
				if deletes == 1 && tc.lost {
					return true, nil, errors.New("connection reset by peer")
				}
				return true, nil, apierrors.NewTooManyRequests("slow down", 1)
			})
			tc.setup(r, *now)
			state := pod(failed("Evicted"))
			d := testPolicy().Decide(state, Facts{Now: t0})
			if tc.lost {
				if out, _ := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); !out.Retry {
					t.Fatalf("first visit %+v: want the untracked lost answer reported and retried", out)
				}
			}
			*now = t0.Add(2 * time.Second)
			tc.between(r, *now)
			_, _ = r.act.Handle(context.Background(), state, d, Facts{Now: *now}) // the retry: 429
			if want := map[bool]int{true: 2, false: 1}[tc.lost]; deletes != want {
				t.Fatalf("%d DELETEs, want %d", deletes, want)
			}
			if len(in.Answers) != 0 {
				t.Fatalf("%d answer records for %d intents; want none: the earlier DELETE may still commit", len(in.Answers), len(in.Msgs))
			}
		})
	}
}

// fillDoubts fills the memory of writes in doubt with other pods' writes.
func fillDoubts(r *actuatorRig) {
	for i := range maxDoubts {
		r.act.doubts.send(&removal{state: &events.PodState{UID: fmt.Sprintf("other-%d", i)}})
	}
}

// answerRig is a rig whose actuator reads its clocks from now (set it to move
// them) and stores its intents, and their answer records, in in.
func answerRig(t *testing.T, p Policy, stored bool, live *corev1.Pod) (r *actuatorRig, in *actuatetest.Journal, now *time.Time) {
	t.Helper()
	r = newRig(t, p, false, actuate.NewWindow(10, time.Minute), live)
	clock := t0
	now = &clock
	r.act.cfg.WindowNow = func() time.Time { return *now }
	r.act.cfg.Now = func() time.Time { return *now }
	in = actuatetest.NewJournal(stored)
	r.act.cfg.Intents = in
	return r, in, now
}

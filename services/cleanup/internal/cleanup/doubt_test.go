package cleanup

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

// lostAnswers are errors of a DELETE the API server may have carried out.
var lostAnswers = map[string]error{
	// actuate.Call's own deadline (or a reset connection): client-go's *url.Error.
	"client deadline": &url.Error{Op: "Delete", URL: "https://api/api/v1/namespaces/apps/pods/web-1", Err: context.DeadlineExceeded},
	// the API server's 504 "may still be processing the request".
	"server timeout": apierrors.NewTimeoutError("the request was processed but its answer timed out", 0),
	"etcd timeout":   apierrors.NewInternalError(errors.New("etcdserver: request timed out")),
}

// opsIDs lists the Nats-Msg-Ids published.
func opsIDs(r *actuatorRig) []string {
	var ids []string
	for _, m := range r.pub.All() {
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
	}
	return ids
}

// TestActuatorDeleteAnswerLost: the API server carries out the DELETE but
// its answer is lost. A lost answer is no refusal: taken for one, the
// retry's GET would find the pod gone and the removal would be neither
// audited nor counted. The write is in doubt (nothing published, slot kept) and the next visit settles it: the pod is
// gone, so its deleted audit is published once.
func TestActuatorDeleteAnswerLost(t *testing.T) {
	for name, answer := range lostAnswers {
		t.Run(name, func(t *testing.T) {
			w := actuate.NewWindow(10, time.Minute)
			r := newRig(t, testPolicy(), false, w, livePod())
			gvr := corev1.SchemeGroupVersion.WithResource("pods")
			r.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				_ = r.client.Tracker().Delete(gvr, "apps", "web-1") // done by the API server ...
				return true, nil, answer                            // ... but the answer is lost
			})
			state := pod(failed("Evicted"))
			d := testPolicy().Decide(state, Facts{Now: t0})
			out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0})
			if err != nil || out.RequeueAfter <= 0 || len(r.pub.All()) != 0 || len(r.eventsSeen()) != 0 || w.Len(t0) != 1 {
				t.Fatalf("first visit: %+v %v, OPS %v, window %d; want a visit again, nothing published, the slot kept",
					out, err, opsIDs(r), w.Len(t0))
			}
			out, err = r.act.Handle(context.Background(), state, d, Facts{Now: t0}) // the controller's retry
			if err != nil || out != (Outcome{}) {
				t.Fatalf("second visit: %+v %v", out, err)
			}
			ids, evs := opsIDs(r), r.eventsSeen()
			if strings.Join(ids, ",") != "cleanup/uid-1/deleted" || len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal CleanupDeleted") || w.Len(t0) != 1 {
				t.Fatalf("the first DELETE removed the pod; want its deleted audit once, no failed, 1 slot held; got OPS %v, Events %v, window %d",
					ids, evs, w.Len(t0))
			}
			if n := r.countDeletes(); n != 1 {
				t.Fatalf("%d DELETEs, want 1", n)
			}
			r.act.Handle(context.Background(), state, d, Facts{Now: t0}) // settled: nothing more
			if len(r.pub.All()) != 1 {
				t.Fatalf("a third visit published again: %v", opsIDs(r))
			}
		})
	}
}

// TestActuatorDeleteAnswerLostMirrorSawItGo: the mirror reports the pod
// gone while the DELETE is still waiting for its answer (a lost answer comes
// after the whole API deadline, the watcher's tombstone within moments), or
// after; the controller never visits a pod the mirror removed, so the news
// itself settles the write: audited once, no second visit needed.
func TestActuatorDeleteAnswerLostMirrorSawItGo(t *testing.T) {
	for _, during := range []bool{true, false} {
		t.Run(fmt.Sprintf("during the write=%v", during), func(t *testing.T) {
			w := actuate.NewWindow(10, time.Minute)
			r := newRig(t, testPolicy(), false, w, livePod())
			gvr := corev1.SchemeGroupVersion.WithResource("pods")
			r.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				_ = r.client.Tracker().Delete(gvr, "apps", "web-1")
				if during {
					r.act.Forget("uid-1") // the mirror's tombstone
				}
				return true, nil, lostAnswers["client deadline"]
			})
			state := pod(failed("Evicted"))
			if _, err := r.act.Handle(context.Background(), state, testPolicy().Decide(state, Facts{Now: t0}), Facts{Now: t0}); err != nil {
				t.Fatal(err)
			}
			if !during {
				r.act.Forget("uid-1")
			}
			r.act.Forget("uid-1") // a repeat settles nothing more
			if ids := opsIDs(r); strings.Join(ids, ",") != "cleanup/uid-1/deleted" || w.Len(t0) != 1 {
				t.Fatalf("OPS %v, window %d; want the deleted audit once and the slot kept", ids, w.Len(t0))
			}
			if n := len(r.act.doubts.m); n != 0 {
				t.Fatalf("%d writes still remembered in doubt", n)
			}
		})
	}
}

// TestActuatorDeleteAnswerLostNotHappened: the answer was lost and the
// write did not happen, and the pod changed since (someone else's write:
// its resourceVersion moved on, no deletion mark), so the DELETE's
// precondition can never hold: it did not happen, final at once. It is
// reported failed once, its slot given back, and the write retried.
func TestActuatorDeleteAnswerLostNotHappened(t *testing.T) {
	w := actuate.NewWindow(10, time.Minute)
	r := newRig(t, testPolicy(), false, w, livePod())
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	lost := true
	r.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if lost {
			lost = false
			return true, nil, lostAnswers["server timeout"]
		}
		return false, nil, nil
	})
	state := pod(failed("Evicted"))
	d := testPolicy().Decide(state, Facts{Now: t0})
	r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	// Someone labels the pod: a new resourceVersion, no deletion mark.
	changed := livePod(func(p *corev1.Pod) { p.ResourceVersion, p.Labels = "8", map[string]string{"team": "a"} })
	if err := r.client.Tracker().Update(gvr, changed, "apps"); err != nil {
		t.Fatal(err)
	}
	if out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); err != nil || out != (Outcome{}) {
		t.Fatalf("second visit: %+v %v", out, err)
	}
	ids := opsIDs(r)
	if strings.Join(ids, ",") != "cleanup/uid-1/failed/delete,cleanup/uid-1/deleted" || w.Len(t0) != 1 || r.countDeletes() != 2 {
		t.Fatalf("OPS %v, window %d, %d DELETEs; want failed then deleted, one slot, two DELETEs", ids, w.Len(t0), r.countDeletes())
	}
}

// TestActuatorFinalizerPatchAnswerLost: the finalizer patch of a pod being
// deleted with grace 0 removes it (ShouldDeleteDuringUpdate), but the
// answer is lost: the next visit finds it gone and audits forcedeleted.
func TestActuatorFinalizerPatchAnswerLost(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	zero := int64(0)
	r := newRig(t, p, false, nil, livePod(liveDeleting, func(p *corev1.Pod) {
		p.Finalizers, p.DeletionGracePeriodSeconds = []string{"example.com/hold"}, &zero
	}))
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	r.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		_ = r.client.Tracker().Delete(gvr, "apps", "web-1")
		return true, nil, lostAnswers["client deadline"]
	})
	state := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers, s.DeletionGracePeriodSeconds = 1, &zero })
	d := p.Decide(state, Facts{Now: t0})
	for range 2 {
		r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	}
	if ids := opsIDs(r); strings.Join(ids, ",") != "cleanup/uid-1/forcedeleted" || r.countDeletes() != 0 {
		t.Fatalf("OPS %v, %d DELETEs; want forcedeleted once, no DELETE", ids, r.countDeletes())
	}
}

func (r *actuatorRig) countDeletes() int {
	n := 0
	for _, a := range r.client.Actions() {
		if a.GetVerb() == "delete" && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

package cordon

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

var nodesGR = schema.GroupResource{Resource: "nodes"}

// loseAnswer makes the next node patch reach the fake API and then lose its
// answer with err (applied: the API applied it and moved the node's
// resourceVersion on, as a real one does; otherwise nothing was written);
// the failedGets node GETs after it fail (the API unreachable for reads).
func loseAnswer(t *testing.T, h *harness, err error, applied bool, failedGets int) {
	t.Helper()
	lost := true
	h.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !lost {
			return false, nil, nil
		}
		lost = false
		failGets(h, failedGets)
		if applied {
			_, obj, perr := k8stesting.ObjectReaction(h.client.Tracker())(a)
			if perr != nil {
				t.Errorf("apply patch: %v", perr)
				return true, nil, err
			}
			n := obj.(*corev1.Node)
			n.ResourceVersion = "42"
			if uerr := h.client.Tracker().Update(a.GetResource(), n, ""); uerr != nil {
				t.Errorf("move the resourceVersion on: %v", uerr)
			}
		}
		return true, nil, err
	})
}

// failGets makes the next k node GETs fail (the API unreachable for reads).
func failGets(h *harness, k int) {
	h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if k == 0 {
			return false, nil, nil
		}
		k--
		return true, nil, apierrors.NewServiceUnavailable("still down")
	})
}

// clock makes the harness's clock settable: the returned func moves it on.
func clock(h *harness) func(time.Duration) {
	now := h.act.cfg.Now()
	h.act.cfg.Now = func() time.Time { return now }
	return func(d time.Duration) { now = now.Add(d) }
}

// verbs counts the published outcomes by verb, and the Events by reason.
func verbs(t *testing.T, h *harness) (map[string]int, map[string]int) {
	t.Helper()
	out, evs := map[string]int{}, map[string]int{}
	for _, m := range decisions(t, h.pub) {
		out[m.D.Verb]++
	}
	for {
		select {
		case e := <-h.rec.Events:
			evs[strings.Fields(e)[1]]++
		default:
			return out, evs
		}
	}
}

// TestActuatorLostPatchAnswerIsAudited: a cordon's answer is lost (a
// timeout, a 5xx, a reset). The write is in doubt, not refused: a consistent
// read of the node settles it, at once or, when the node cannot be read
// either, at the retry, before anything else. A write the node shows gets
// the success path (one cordoned message with the id built before the patch,
// its Event, its rate slot); one the node does not show (same
// resourceVersion) stays in doubt until it can no longer commit (the
// late-commit horizon), is then failed, its slot still counted, and the retry
// cordons. Each attempt has exactly one outcome.
func TestActuatorLostPatchAnswerIsAudited(t *testing.T) {
	lost := map[string]error{
		"server timeout": apierrors.NewServerTimeout(nodesGR, "patch", 1),
		"504":            apierrors.NewTimeoutError("request did not complete", 1),
		"client timeout": context.DeadlineExceeded,
		"reset":          errors.New("read tcp: connection reset by peer"),
		// A proxy in front of the API server timed the request out; the
		// server may have gone on and applied it.
		"408": apierrors.NewGenericServerResponse(http.StatusRequestTimeout, "patch", nodesGR, "a", "", 0, true),
	}
	for _, tc := range []struct {
		name       string
		applied    bool
		failedGets int // node GETs that fail after the lost answer
	}{
		{"applied, settled at once", true, 0},
		{"applied, the read fails too: settled by the retry", true, 1},
		{"not applied: failed, the retry cordons", false, 0},
		{"not applied, the read fails too: settled by the retry", false, 1},
	} {
		for errName, err := range lost {
			t.Run(tc.name+"/"+errName, func(t *testing.T) {
				n := apiNode("a")
				p := seedPolicy("cordon")
				h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
				win := actuate.NewWindow(5, 10*time.Minute)
				h.act.cfg.Limiter = win
				advance := clock(h)
				loseAnswer(t, h, err, tc.applied, tc.failedGets)
				state := mirrorOf(n, 100)
				first, aerr := h.act.Apply(context.Background(), state, false, Evaluate(p, state, false))
				if (aerr == nil) != (tc.failedGets == 0) {
					t.Fatalf("first Apply: %v", aerr)
				}
				if !tc.applied && tc.failedGets == 0 && first.RequeueAfter <= 0 {
					t.Fatalf("first Apply: %+v, want a settling read later (the node is unchanged)", first)
				}
				if got := decisions(t, h.pub); (tc.failedGets > 0 || !tc.applied) && len(got) != 0 {
					t.Fatalf("published %+v while the write is in doubt, want nothing yet", got)
				}
				if !tc.applied {
					advance(h.act.horizon())
				}
				// The retries, from the mirror's old state and from its new one.
				for _, s := range []*events.NodeState{state, mirrorOf(h.node(t, "a"), 100)} {
					marked := h.ledger.Marked(s)
					if _, err := h.act.Apply(context.Background(), s, marked, Evaluate(p, s, marked)); err != nil {
						t.Fatalf("retry: %v", err)
					}
				}
				// A write that was in doubt keeps its slot: not applied, it and
				// the retry's cordon both count.
				wantFailed, wantPatches, wantSlots := 1, 2, 2
				if tc.applied {
					wantFailed, wantPatches, wantSlots = 0, 1, 1
				}
				out, evs := verbs(t, h)
				if out[VerbCordoned] != 1 || out[VerbFailed] != wantFailed || evs[EventCordoned] != 1 || evs[EventActionFailed] != wantFailed {
					t.Fatalf("published %v, Events %v; want one cordoned and %d failed, each with its Event", out, evs, wantFailed)
				}
				if got := len(h.writes()); got != wantPatches {
					t.Fatalf("%d patches, want %d", got, wantPatches)
				}
				if got := win.Len(h.act.cfg.Now()); got != wantSlots {
					t.Errorf("rate window holds %d actions, want %d", got, wantSlots)
				}
				for _, m := range decisions(t, h.pub) {
					if m.D.Verb == VerbCordoned && m.ID != "cordon/uid-a/cordoned/41" {
						t.Errorf("cordoned id %s, want the one built before the patch", m.ID)
					}
				}
			})
		}
	}
}

// TestActuatorNoWriteWhileInDoubt: while a's cordon is in doubt and the API
// cannot be read, b's cordon does not go out (the cap could not count a's);
// once a read settles a's, b's goes out.
func TestActuatorNoWriteWhileInDoubt(t *testing.T) {
	a, b := apiNode("a"), apiNode("b")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)...)
	loseAnswer(t, h, context.DeadlineExceeded, true, 2)
	sa, sb := mirrorOf(a, 100), mirrorOf(b, 100)
	if _, err := h.act.Apply(context.Background(), sa, false, Evaluate(p, sa, false)); err == nil {
		t.Fatal("a: want the write in doubt")
	}
	if _, err := h.act.Apply(context.Background(), sb, false, Evaluate(p, sb, false)); err == nil || len(h.writes()) != 1 {
		t.Fatalf("b while a is in doubt: %v, %d patches; want an error and a's patch only", err, len(h.writes()))
	}
	if _, err := h.act.Apply(context.Background(), sb, false, Evaluate(p, sb, false)); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range decisions(t, h.pub) {
		got[m.D.Verb+"/"+m.D.Node]++
	}
	if len(got) != 2 || got["cordoned/a"] != 1 || got["cordoned/b"] != 1 || len(h.writes()) != 2 {
		t.Fatalf("published %v, %d patches; want a's and b's cordons once each", got, len(h.writes()))
	}
}

// TestActuatorThrottledPatchIsRetriedQuietly: a 429 is given before the
// request is processed, so the patch wrote nothing: no failed audit, no write
// in doubt holding every other cordon until the late-commit horizon, the
// slot given back, and the next Apply writes at once.
func TestActuatorThrottledPatchIsRetriedQuietly(t *testing.T) {
	a := apiNode("a")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a}, pods("a", 100)...)...)
	throttled := true
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !throttled {
			return false, nil, nil
		}
		throttled = false
		return true, nil, apierrors.NewTooManyRequests("the apiserver is shutting down, please try again later", 1)
	})
	s := mirrorOf(a, 100)
	o, err := h.act.Apply(context.Background(), s, false, Evaluate(p, s, false))
	if err != nil || !o.Retry || o.RequeueAfter != 0 {
		t.Fatalf("throttled patch: %+v, %v; want a quiet retry", o, err)
	}
	if h.act.doubt != nil {
		t.Fatal("a throttled patch was held in doubt")
	}
	if got := decisions(t, h.pub); len(got) != 0 {
		t.Fatalf("published %v for a patch that wrote nothing, want nothing", got)
	}
	if _, err := h.act.Apply(context.Background(), s, false, Evaluate(p, s, false)); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range decisions(t, h.pub) {
		got[m.D.Verb]++
	}
	if got[VerbCordoned] != 1 || len(got) != 1 {
		t.Fatalf("after the retry published %v, want one cordoned", got)
	}
}

// TestMarkRemovedNeedsTheReleaseRecord: a node that moved on without
// opswire's mark shows a release in doubt only when opswire's release record
// names that release's version; a mark a person removed by hand, or a record
// of another release, is not it.
func TestMarkRemovedNeedsTheReleaseRecord(t *testing.T) {
	p := seedPolicy(EffectCordon)
	record := func(verb, rv string) map[string]string {
		return map[string]string{AnnotationReleased: `{"verb":"` + verb + `","rv":"` + rv + `","time":"2026-12-07T10:00:00Z"}`}
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		cordoned    bool
		verb        string
		want        bool
	}{
		{"uncordon recorded, node schedulable", record(VerbUncordoned, "7"), false, VerbUncordoned, true},
		{"uncordon recorded, a person cordoned since", record(VerbUncordoned, "7"), true, VerbUncordoned, true},
		{"mark removed by hand, cordon kept", nil, true, VerbUncordoned, false},
		{"an earlier release's record", record(VerbUncordoned, "3"), true, VerbUncordoned, false},
		{"a hand-over's record for an uncordon", record(VerbHandedOver, "7"), true, VerbUncordoned, false},
		{"hand-over recorded", record(VerbHandedOver, "7"), true, VerbHandedOver, true},
		{"mark still there", map[string]string{events.AnnotationAutoCordon: `{"effects":["cordon"]}`, AnnotationReleased: record(VerbUncordoned, "7")[AnnotationReleased]}, true, VerbUncordoned, false},
	} {
		node := &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: tc.cordoned}}
		node.Annotations = tc.annotations
		if got := markRemoved(p, node, tc.verb, "7"); got != tc.want {
			t.Errorf("%s: markRemoved = %v, want %v", tc.name, got, tc.want)
		}
	}
}

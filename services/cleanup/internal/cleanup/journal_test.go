package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// createdEvents returns the Events created through the fake client.
func (r *actuatorRig) createdEvents() []*corev1.Event {
	var out []*corev1.Event
	for _, a := range r.client.Actions() {
		if c, ok := a.(k8stesting.CreateAction); ok && a.GetResource().Resource == "events" {
			out = append(out, c.GetObject().(*corev1.Event))
		}
	}
	return out
}

// TestActuatorJournalEvent: when OPS does not store the intent in time, the
// actuator writes it as a CleanupIntent Event through the API, before the
// DELETE, carrying the intent OPS would have held and the slot's time;
// stored in OPS, no such Event is written. Either way the outcome Event
// carries the same annotations.
func TestActuatorJournalEvent(t *testing.T) {
	for _, stored := range []bool{false, true} {
		r := newRig(t, testPolicy(), false, nil, livePod())
		in := &intentRec{stored: stored}
		r.act.cfg.Intents = in
		var created, atDelete int // (a reactor cannot read Actions: it runs under the fake's lock)
		r.client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
			created++
			return false, nil, nil
		})
		r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			atDelete = created
			return false, nil, nil
		})
		st := pod(failed("Evicted"))
		if _, err := r.act.Handle(context.Background(), st, testPolicy().Decide(st, Facts{Now: t0}), Facts{Now: t0}); err != nil {
			t.Fatal(err)
		}
		evs := r.createdEvents()
		recorded := r.eventsSeen()
		if len(recorded) != 1 || !strings.HasPrefix(recorded[0], "Normal CleanupDeleted ") || !strings.Contains(recorded[0], AnnotationIntent) {
			t.Fatalf("stored=%v: outcome Events %q, want one CleanupDeleted with the journal annotations", stored, recorded)
		}
		if stored {
			if len(evs) != 0 {
				t.Fatalf("intent stored in OPS, yet %d Events written through the API", len(evs))
			}
			continue
		}
		if len(evs) != 1 || atDelete != 1 {
			t.Fatalf("%d journal Events, %d of them before the DELETE; want one, before", len(evs), atDelete)
		}
		ev := evs[0]
		if ev.Reason != EventIntent || ev.Namespace != "apps" || ev.InvolvedObject.UID != "uid-1" || ev.InvolvedObject.Name != "web-1" ||
			ev.Source.Component != EventSource || ev.Type != corev1.EventTypeNormal || ev.Count != 1 {
			t.Fatalf("journal Event %+v", ev)
		}
		if ev.Annotations[AnnotationIntent] != string(in.msgs[0].Data) {
			t.Fatalf("journal Event carries %s, want the intent %s", ev.Annotations[AnnotationIntent], in.msgs[0].Data)
		}
		if at, err := time.Parse(time.RFC3339Nano, ev.Annotations[AnnotationActionTime]); err != nil || !at.Equal(t0) {
			t.Fatalf("action time %q (%v), want the slot's %v", ev.Annotations[AnnotationActionTime], err, t0)
		}
		if got := testutil.ToFloat64(r.metrics.JournalEvents); got != 1 {
			t.Fatalf("opswire_cleanup_journal_events_total = %v, want 1", got)
		}
	}
}

// TestActuatorJournalEventFails: neither OPS nor the API stores the intent:
// the removal is held back (no DELETE, nothing published), the slot is
// given back and the pod retried.
func TestActuatorJournalEventFails(t *testing.T) {
	w := actuate.NewWindow(1, time.Minute)
	r := newRig(t, testPolicy(), false, w, livePod())
	r.act.cfg.Intents = &intentRec{stored: false}
	r.client.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("API down")
	})
	st := pod(failed("Evicted"))
	out, err := r.act.Handle(context.Background(), st, testPolicy().Decide(st, Facts{Now: t0}), Facts{Now: t0})
	if err == nil || !out.Retry {
		t.Fatalf("Handle = %+v, %v; want a retry with the error", out, err)
	}
	for _, wr := range r.writes() {
		if wr == "delete pods" {
			t.Fatal("pod deleted without a journal")
		}
	}
	if n := len(r.pub.all()); n != 0 {
		t.Fatalf("%d messages published", n)
	}
	if n := w.Len(t0); n != 0 {
		t.Fatalf("window holds %d, want the slot given back", n)
	}
}

// journalEv is a removal Event of pod apps/<name> (uid) as the actuator
// writes it, with its action time at.
func journalEv(t *testing.T, reason, name, uid string, at time.Time) *corev1.Event {
	t.Helper()
	osubj := "ops.c1.cleanup.deleted.apps." + name
	oev, err := envelope.New("cleanup/"+uid+"/deleted", envelope.Source("c1", Service), events.TypeCleanup, "apps/"+name,
		events.CleanupDecision{Verb: VerbDeleted, Namespace: "apps", Pod: name, PodUID: uid}, at)
	if err != nil {
		t.Fatal(err)
	}
	_, iev, err := actuate.NewIntent("c1", events.Intent{Actor: Service, Action: VerbDeleted, Kind: "Pod", Namespace: "apps", Name: name, UID: uid}, osubj, oev)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: "apps", Name: name + "." + reason, Annotations: journalAnnotations(iev, at)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "apps", Name: name, UID: types.UID(uid)},
		Reason:         reason, Source: corev1.EventSource{Component: EventSource},
	}
}

// TestLiveActions: the actor's removals as its Events show them. a: intent
// and outcome Event, one action at the slot's time; b: intent only, pod
// gone: happened; c: intent only, the same pod still there: Pending; d:
// outcome only. Left out: e, before the span; f, another component's; g,
// without the journal annotations; Skip Events. Each carries the outcome
// as journaled (id cleanup/<uid>/deleted). A failed LIST or re-read fails.
func TestLiveActions(t *testing.T) {
	since := t0.Add(-10 * time.Minute)
	other := journalEv(t, EventDeleted, "f", "uid-f", t0)
	other.Source.Component = "someone-else"
	bare := journalEv(t, EventDeleted, "g", "uid-g", t0)
	bare.Annotations = nil
	skip := journalEv(t, "CleanupSkipped", "h", "uid-h", t0)
	objs := []runtime.Object{
		journalEv(t, EventIntent, "a", "uid-a", t0.Add(-time.Minute)), journalEv(t, EventDeleted, "a", "uid-a", t0.Add(-time.Minute+2*time.Second)),
		journalEv(t, EventIntent, "b", "uid-b", t0), journalEv(t, EventIntent, "c", "uid-c", t0),
		journalEv(t, EventDeleted, "d", "uid-d", t0), journalEv(t, EventDeleted, "e", "uid-e", since.Add(-time.Second)),
		other, bare, skip,
		livePod(func(p *corev1.Pod) { p.Name, p.UID = "c", "uid-c" }),
	}
	r := newRig(t, testPolicy(), false, nil, objs...)
	got, err := r.act.LiveActions(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	summary := map[string]string{}
	for _, la := range got {
		var d events.CleanupDecision
		if err := json.Unmarshal(la.Outcome.Data, &d); err != nil {
			t.Fatal(err)
		}
		if la.Outcome.ID != "cleanup/"+d.PodUID+"/deleted" || la.Subject != "ops.c1.cleanup.deleted.apps."+d.Pod || la.Outcome.Type != events.TypeCleanup {
			t.Fatalf("%s: outcome %s on %s", d.Pod, la.Outcome.ID, la.Subject)
		}
		if _, dup := summary[d.Pod]; dup {
			t.Fatalf("%s listed twice", d.Pod)
		}
		summary[d.Pod] = la.Time.Sub(t0).String()
		if la.Pending {
			summary[d.Pod] += " pending"
		}
	}
	want := map[string]string{"a": "-1m0s", "b": "0s", "c": "0s pending", "d": "0s"}
	if len(summary) != len(want) {
		t.Fatalf("live actions %v, want %v", summary, want)
	}
	for k, v := range want {
		if summary[k] != v {
			t.Fatalf("live actions %v, want %v", summary, want)
		}
	}

	r.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("API down")
	})
	if _, err := r.act.LiveActions(context.Background(), since); err == nil {
		t.Fatal("a failed re-read of an intent's pod must fail (the recovery retries)")
	}
	r.client.PrependReactor("list", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("API down")
	})
	if _, err := r.act.LiveActions(context.Background(), since); err == nil {
		t.Fatal("a failed LIST must fail (the recovery retries: fail closed)")
	}
}

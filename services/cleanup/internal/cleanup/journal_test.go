package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
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
// DELETE, carrying the intent OPS would have held and the time it is written;
// stored in OPS, no such Event is written. Either way the outcome Event
// carries the same annotations.
func TestActuatorJournalEvent(t *testing.T) {
	for _, stored := range []bool{false, true} {
		r := newRig(t, testPolicy(), false, nil, livePod())
		in := actuatetest.NewJournal(stored)
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
		if ev.Annotations[AnnotationIntent] != string(in.Msgs[0].Data) {
			t.Fatalf("journal Event carries %s, want the intent %s", ev.Annotations[AnnotationIntent], in.Msgs[0].Data)
		}
		if at, err := time.Parse(time.RFC3339Nano, ev.Annotations[AnnotationActionTime]); err != nil || !at.Equal(t0) {
			t.Fatalf("action time %q (%v), want the time it was written, %v", ev.Annotations[AnnotationActionTime], err, t0)
		}
		if got := testutil.ToFloat64(r.metrics.JournalEvents); got != 1 {
			t.Fatalf("opswire_cleanup_journal_events_total = %v, want 1", got)
		}
	}
}

// TestJournalEventOfTheLongestPodName: the journal Event of a pod whose name
// is 253 characters long is one the API server accepts (named as client-go's
// recorder names Events: <pod>.<hex nanoseconds>, a UUID when that is too
// long), and names the pod in full. Named <pod>.<hex nanoseconds> always,
// the journal of a pod named over 236 characters was refused, and with it
// the removal, for as long as OPS was away.
func TestJournalEventOfTheLongestPodName(t *testing.T) {
	long := strings.Repeat("w", 250) + "-01"
	r := newRig(t, testPolicy(), false, nil, livePod(func(p *corev1.Pod) { p.Name = long }))
	r.act.cfg.Intents = actuatetest.NewJournal(false)
	st := pod(failed("Evicted"))
	st.Name = long
	if _, err := r.act.Handle(context.Background(), st, testPolicy().Decide(st, Facts{Now: t0}), Facts{Now: t0}); err != nil {
		t.Fatal(err)
	}
	evs := r.createdEvents()
	if len(evs) != 1 || evs[0].InvolvedObject.Name != long {
		t.Fatalf("journal Events %+v; want one, naming the pod", evs)
	}
	if msgs := validation.IsDNS1123Subdomain(evs[0].Name); len(msgs) > 0 {
		t.Fatalf("journal Event name %q (%d characters) would be refused: %v", evs[0].Name, len(evs[0].Name), msgs)
	}
}

// TestActuatorJournalEventFails: neither OPS nor the API stores the intent:
// the removal is held back (no DELETE, nothing published), the slot is
// given back and the pod retried.
func TestActuatorJournalEventFails(t *testing.T) {
	w := actuate.NewWindow(1, time.Minute)
	r := newRig(t, testPolicy(), false, w, livePod())
	r.act.cfg.Intents = actuatetest.NewJournal(false)
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
	if n := len(r.pub.All()); n != 0 {
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
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name + "." + reason, Annotations: journalAnnotations(iev, at),
			CreationTimestamp: metav1.NewTime(at.Add(time.Second))},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "apps", Name: name, UID: types.UID(uid)},
		Reason:         reason, Source: corev1.EventSource{Component: EventSource},
	}
}

// TestLiveActions: the actor's removals as its Events show them. a: intent
// and outcome Event, one action at the later action time; b: intent only, pod
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
	want := map[string]string{"a": "-58s", "b": "0s", "c": "0s pending", "d": "0s"} // a: the later of its two times
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

// reforge rewrites the journaled intent of a removal Event, as anyone
// allowed to create Events in its namespace can.
func reforge(t *testing.T, ev *corev1.Event, edit func(in *events.Intent, d *events.CleanupDecision)) *corev1.Event {
	t.Helper()
	var in events.Intent
	if err := json.Unmarshal([]byte(ev.Annotations[AnnotationIntent]), &in); err != nil {
		t.Fatal(err)
	}
	var d events.CleanupDecision
	if err := json.Unmarshal(in.Outcome.Data, &d); err != nil {
		t.Fatal(err)
	}
	edit(&in, &d)
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	in.Outcome.Data = raw
	ij, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ev.Annotations[AnnotationIntent] = string(ij)
	return ev
}

// TestLiveActionsForged: removal Events are not authenticated. Each forged
// form below is refused (counted as forged or invalid, nothing
// counted or published): an intent naming another namespace's pod, an
// attacker-chosen outcome id, subject (cleanup's own intent subject among
// them) or type, a decision naming another pod, an Event whose namespace is
// not its pod's, an action time in the future. What passes is rebuilt from
// the Event's own fields: a self-consistent forgery about a pod in the
// forger's namespace (the documented residual) becomes at most this actor's
// own audit of that pod (id cleanup/<uid>/<verb>, its subject, type and
// source), without the forged severity, error or dry-run flag, and an
// action time after the Event's creation counts at the creation.
func TestLiveActionsForged(t *testing.T) {
	since := t0.Add(-10 * time.Minute)
	ev := func(name string, edit func(in *events.Intent, d *events.CleanupDecision)) *corev1.Event {
		return reforge(t, journalEv(t, EventDeleted, name, "uid-"+name, t0.Add(-time.Second)), edit)
	}
	refused := map[string]*corev1.Event{
		"other namespace": ev("f1", func(in *events.Intent, d *events.CleanupDecision) {
			in.Namespace, in.Name, d.Namespace, d.Pod = "kube-system", "coredns", "kube-system", "coredns"
			in.Outcome.Subject, in.Outcome.ID, in.Outcome.Type = "ops.c1.cleanup.deleted.kube-system.coredns", "attacker-chosen-id", "io.example.forged"
		}),
		"intent subject": ev("f2", func(in *events.Intent, _ *events.CleanupDecision) {
			in.Outcome.Subject, in.Outcome.ID, in.Outcome.Type = "ops.c1.cleanup.intent.apps.f2", "cleanup/uid-f2/deleted/intent", events.TypeIntent
		}),
		"outcome subject": ev("f3", func(in *events.Intent, _ *events.CleanupDecision) {
			in.Outcome.Subject = "ops.c1.cleanup.deleted.kube-system.coredns"
		}),
		"outcome id":     ev("f4", func(in *events.Intent, _ *events.CleanupDecision) { in.Outcome.ID = "id-1" }),
		"outcome type":   ev("f5", func(in *events.Intent, _ *events.CleanupDecision) { in.Outcome.Type = "io.example.forged" }),
		"outcome source": ev("f6", func(in *events.Intent, _ *events.CleanupDecision) { in.Outcome.Source = "opswire/c2/cordon" }),
		"decision pod":   ev("f7", func(_ *events.Intent, d *events.CleanupDecision) { d.Namespace, d.Pod = "kube-system", "coredns" }),
		"decision uid":   ev("f8", func(_ *events.Intent, d *events.CleanupDecision) { d.PodUID = "uid-victim" }),
		"verb": ev("f9", func(in *events.Intent, d *events.CleanupDecision) {
			in.Action, d.Verb = VerbForceDeleted, VerbForceDeleted
		}),
		"intent verb": reforge(t, journalEv(t, EventIntent, "f10", "uid-f10", t0), func(in *events.Intent, d *events.CleanupDecision) {
			in.Action, d.Verb = actuate.VerbIntent, actuate.VerbIntent
			in.Outcome.Subject, in.Outcome.ID = "ops.c1.cleanup.intent.apps.f10", "cleanup/uid-f10/intent"
		}),
		"future time": journalEv(t, EventDeleted, "f11", "uid-f11", t0.Add(50*365*24*time.Hour)),
	}
	refused["event namespace"] = journalEv(t, EventDeleted, "f12", "uid-f12", t0)
	refused["event namespace"].Namespace = "tenant"
	refused["future time"].CreationTimestamp = metav1.NewTime(t0)
	// Names no pod can have, which client-go refuses to put in a URL (the
	// API server does not validate an Event's involvedObject): a re-read
	// would fail on every attempt.
	for i, name := range []string{"x/y", "a%b", ".", "..", "UPPER", strings.Repeat("n", 254)} {
		refused["pod name "+name] = journalEv(t, EventIntent, name, "uid-n"+strconv.Itoa(i), t0)
	}
	badNS := journalEv(t, EventDeleted, "f13", "uid-f13", t0)
	badNS.Namespace, badNS.InvolvedObject.Namespace = "a.b", "a.b"
	refused["namespace a.b"] = badNS
	for k, e := range refused {
		e.UID = types.UID("event-" + k)
	}

	residual := ev("r1", func(_ *events.Intent, d *events.CleanupDecision) {
		d.Severity, d.Error, d.DryRun, d.Message = events.SeverityCritical, "forged error", true, strings.Repeat("x", 5000)
	})
	late := journalEv(t, EventDeleted, "r2", "uid-r2", t0)
	late.CreationTimestamp = metav1.NewTime(t0.Add(-8 * time.Minute)) // the action time claims 8 min after the Event existed
	objs := []runtime.Object{residual, late}
	for _, e := range refused {
		objs = append(objs, e)
	}
	r := newRig(t, testPolicy(), false, nil, objs...)
	got, err := r.act.LiveActions(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	if forged, invalid := testutil.ToFloat64(r.metrics.RecoveryRejected.WithLabelValues("forged")),
		testutil.ToFloat64(r.metrics.RecoveryRejected.WithLabelValues("invalid")); forged != float64(len(refused)-1) || invalid != 1 {
		t.Fatalf("refused: forged %v, invalid %v; want %d and 1", forged, invalid, len(refused)-1)
	}
	if len(got) != 2 {
		t.Fatalf("%d live actions %+v, want the two self-consistent ones (r1, r2)", len(got), got)
	}
	// A retried recovery lists them again: each refused Event is counted once.
	if _, err := r.act.LiveActions(context.Background(), since); err != nil {
		t.Fatal(err)
	}
	if forged := testutil.ToFloat64(r.metrics.RecoveryRejected.WithLabelValues("forged")); forged != float64(len(refused)-1) {
		t.Fatalf("refused Events counted again on a second listing: forged %v, want %d", forged, len(refused)-1)
	}
	for _, la := range got {
		var d events.CleanupDecision
		if err := json.Unmarshal(la.Outcome.Data, &d); err != nil {
			t.Fatal(err)
		}
		if la.Outcome.ID != "cleanup/uid-"+d.Pod+"/deleted" || la.Subject != "ops.c1.cleanup.deleted.apps."+d.Pod ||
			la.Outcome.Type != events.TypeCleanup || la.Outcome.Source != envelope.Source("c1", Service) || la.Outcome.Subject != "apps/"+d.Pod {
			t.Fatalf("%s: outcome %+v on %s", d.Pod, la.Outcome, la.Subject)
		}
		if la.Check == nil || la.Check.UID != "uid-"+d.Pod || la.Check.Namespace != "apps" || la.Check.Name != d.Pod || la.Pending {
			t.Fatalf("%s: an outcome Event's action must carry its pod to re-read before publishing, got %+v", d.Pod, la.Check)
		}
		if d.Severity != events.SeverityInfo || d.Error != "" || d.DryRun || len(d.Message) > maxText {
			t.Fatalf("%s: rebuilt decision keeps forged fields: %+v", d.Pod, d)
		}
		switch d.Pod {
		case "r1":
			if !la.Time.Equal(t0.Add(-time.Second)) {
				t.Fatalf("r1 counted at %v", la.Time)
			}
		case "r2":
			if !la.Time.Equal(late.CreationTimestamp.Time) {
				t.Fatalf("r2 counted at t0%v, want its Event's creation (t0-8m)", la.Time.Sub(t0))
			}
		}
	}
}

// TestLiveActionsRetry: a removal whose first DELETE failed (slot given
// back, its CleanupIntent Event left) and whose retry went through 45 s
// later counts at the retry's slot, the one the window held.
func TestLiveActionsRetry(t *testing.T) {
	a := journalEv(t, EventIntent, "p", "uid-p", t0.Add(-50*time.Second))
	a.Name = "p.1"
	b := journalEv(t, EventIntent, "p", "uid-p", t0.Add(-5*time.Second))
	b.Name = "p.2"
	c := journalEv(t, EventDeleted, "p", "uid-p", t0.Add(-5*time.Second))
	for _, order := range [][]runtime.Object{{a, b, c}, {c, b, a}} {
		r := newRig(t, testPolicy(), false, nil, order...)
		las, err := r.act.LiveActions(context.Background(), t0.Add(-10*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if len(las) != 1 || !las[0].Time.Equal(t0.Add(-5*time.Second)) || las[0].Pending {
			t.Fatalf("live actions %+v, want one at t0-5s, happened", las)
		}
		var d events.CleanupDecision
		if err := json.Unmarshal(las[0].Outcome.Data, &d); err != nil {
			t.Fatal(err)
		}
		if !las[0].Outcome.Time.Equal(las[0].Time) || !d.Time.Equal(las[0].Time) {
			t.Fatalf("outcome at %v (decision %v), want the counted Event's time %v", las[0].Outcome.Time, d.Time, las[0].Time)
		}
	}
}

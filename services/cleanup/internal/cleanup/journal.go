package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	recordutil "k8s.io/client-go/tools/record/util"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// EventSource is the component of the Kubernetes Events cleanup records.
const EventSource = "opswire-" + Service

// Reasons of the removal Events. EventIntent is the write-ahead record this
// actor writes, synchronously, before a removal whose intent OPS did not
// store in time (a NATS outage); the others are the outcomes.
const (
	EventDeleted           = "CleanupDeleted"
	EventForceDeleted      = "CleanupForceDeleted"
	EventDeletionRequested = "CleanupDeletionRequested"
	EventIntent            = "CleanupIntent"
)

// Annotations of the removal Events: AnnotationIntent holds the intent
// (events.Intent as JSON, the one journaled on OPS, carrying the complete
// outcome message); AnnotationActionTime when the action counts in the rate
// window, on the actor's window clock (RFC 3339, nanoseconds): on an outcome
// Event the answer of the removal's last write (when the window's slot
// starts), on the CleanupIntent Event, written right before the writes, when
// it was written (the earliest they can have reached the API: a slot counted
// from before the intent's timeout would free a second early).
const (
	AnnotationIntent     = "opswire.io/cleanup-intent"
	AnnotationActionTime = "opswire.io/cleanup-action-time"
)

// journalAnnotations are the annotations of a removal's Events: the intent
// event's payload (the events.Intent, as JSON) and the action's time.
func journalAnnotations(intent envelope.Event, at time.Time) map[string]string {
	return map[string]string{AnnotationIntent: string(intent.Data), AnnotationActionTime: actionTime(at)}
}

// actionTime is the AnnotationActionTime value of at.
func actionTime(at time.Time) string { return at.UTC().Format(time.RFC3339Nano) }

// journalEvent writes the CleanupIntent Event of a removal synchronously
// (one API call, within APITimeout), before the write. It is the write-ahead
// record when OPS did not store the intent: a Kubernetes Event does not
// depend on NATS and outlives the deleted pod, so a new leader finds the
// removal there even when this leader is SIGKILLed before NATS returns
// (LiveActions). An error holds the removal back.
func (a *Actuator) journalEvent(ctx context.Context, live *corev1.Pod, verb string, ann map[string]string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: recordutil.GenerateEventName(live.Name, now.UnixNano()), Namespace: live.Namespace, Annotations: intentAnnotations(ann, a.cfg.WindowNow())},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: live.Namespace, Name: live.Name,
			UID: live.UID, ResourceVersion: live.ResourceVersion},
		Reason: EventIntent,
		Message: fmt.Sprintf("opswire-cleanup is about to remove this pod (%s); OPS did not store the intent in time, so it is journaled here",
			verb),
		Source:         corev1.EventSource{Component: EventSource, Host: a.cfg.Replica},
		FirstTimestamp: now, LastTimestamp: now, Count: 1, Type: corev1.EventTypeNormal,
	}
	_, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Event, error) {
		return a.client.CoreV1().Events(live.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	})
	return err
}

// intentAnnotations are a CleanupIntent Event's: the removal's, with the
// action time at, when the Event is written. A copy: the outcome Event's
// (ann) get the write's answer later.
func intentAnnotations(ann map[string]string, at time.Time) map[string]string {
	out := maps.Clone(ann)
	if out != nil {
		out[AnnotationActionTime] = actionTime(at)
	}
	return out
}

// Bounds of a removal Event's action time (LiveActions). The time is the
// writer's clock when the slot was taken, a little before the Event was
// created (creationTimestamp, the API server's clock): one after
// now+recoverySkew is refused; one after creation+recoverySkew or more than
// recoveryLag before creation is not believed and counts at the creation.
const (
	recoverySkew = time.Minute
	recoveryLag  = 5 * time.Minute
)

// The recovery's LIST of Events: page size and the least timeout of a page.
const (
	listEventsPage    = 500
	listEventsTimeout = 30 * time.Second
)

// maxText bounds the free-text fields of a rebuilt decision.
const maxText = 1024

// removalVerb is the verb of a removal Event's reason ("" for any other
// reason; the CleanupIntent Event carries any removal verb: "*").
func removalVerb(reason string) string {
	switch reason {
	case EventDeleted:
		return VerbDeleted
	case EventForceDeleted:
		return VerbForceDeleted
	case EventDeletionRequested:
		return VerbDeletionRequested
	case EventIntent:
		return "*"
	}
	return ""
}

// errForged and errInvalid classify a refused removal Event (the reject
// metric's why).
var (
	errForged  = errors.New("forged")
	errInvalid = errors.New("invalid")
)

// liveAction is one removal Event read and checked by LiveActions.
type liveAction struct {
	at       time.Time
	in       events.Intent // rebuilt from the Event's own fields
	subject  string
	outcome  envelope.Event
	happened bool
	event    *corev1.Event // the Event whose time counts
	created  time.Time     // the latest creationTimestamp of its Events (the API server's clock)
}

// readRemovalEvent checks a removal Event and rebuilds its outcome audit
// from what it can trust. Anyone allowed to create Events in a namespace
// (every kubelet, many controllers, a tenant's editors) can write an Event
// claiming opswire-cleanup's source with any annotations, so nothing of the
// annotations is published as is: the id, subject, type and source are this
// actor's, derived from the Event's namespace and involvedObject (name and
// uid) and the verb of its reason; the journaled intent must name that very
// pod and verb, and its decision (events.CleanupDecision) that pod, or the
// Event is refused as forged; of the decision only the descriptive fields
// are kept, bounded. The action time must not be in the future
// (now+recoverySkew) and is believed only within
// [creation-recoveryLag, creation+recoverySkew], otherwise it counts at the
// Event's creation (which the API server sets).
func (a *Actuator) readRemovalEvent(ev *corev1.Event, now time.Time) (*liveAction, error) {
	verb := removalVerb(ev.Reason)
	obj := ev.InvolvedObject
	if verb == "" || ev.Source.Component != EventSource || obj.Kind != "Pod" || obj.UID == "" || obj.Name == "" ||
		obj.Namespace != ev.Namespace {
		return nil, fmt.Errorf("%w: not a removal Event of a pod in its own namespace", errForged)
	}
	if err := podName(obj.Namespace, obj.Name); err != nil {
		// The API server does not validate an Event's involvedObject; a
		// name no pod can have would fail every re-read (Happened).
		return nil, fmt.Errorf("%w: %v", errForged, err)
	}
	at, err := time.Parse(time.RFC3339Nano, ev.Annotations[AnnotationActionTime])
	if err != nil {
		return nil, fmt.Errorf("%w: action time: %v", errInvalid, err)
	}
	if at.After(now.Add(recoverySkew)) {
		return nil, fmt.Errorf("%w: action time %s is in the future", errInvalid, at.Format(time.RFC3339Nano))
	}
	if created := ev.CreationTimestamp.Time; created.IsZero() {
		return nil, fmt.Errorf("%w: no creationTimestamp", errInvalid)
	} else if at.After(created.Add(recoverySkew)) || at.Before(created.Add(-recoveryLag)) {
		at = created
	}
	var in events.Intent
	if err := json.Unmarshal([]byte(ev.Annotations[AnnotationIntent]), &in); err != nil {
		return nil, fmt.Errorf("%w: intent: %v", errInvalid, err)
	}
	if verb == "*" {
		verb = in.Action
	}
	switch verb {
	case VerbDeleted, VerbForceDeleted, VerbDeletionRequested:
	default:
		return nil, fmt.Errorf("%w: verb %q is not a removal", errForged, in.Action)
	}
	ns, name, uid := ev.Namespace, obj.Name, string(obj.UID)
	if in.Actor != Service || in.Action != verb || in.Kind != "Pod" || in.Namespace != ns || in.Name != name || in.UID != uid {
		return nil, fmt.Errorf("%w: the intent names %s %s/%s (%s, %s), not the Event's pod", errForged, in.Kind, in.Namespace, in.Name,
			in.UID, in.Action)
	}
	id, subj, src := "cleanup/"+uid+"/"+verb, subject.Ops(a.cfg.Cluster, Service, verb, ns, name), envelope.Source(a.cfg.Cluster, Service)
	o := in.Outcome
	if o.ID != id || o.Subject != subj || o.Type != events.TypeCleanup || o.Source != src {
		return nil, fmt.Errorf("%w: the outcome %s on %s (%s from %s) is not this pod's removal", errForged, o.ID, o.Subject, o.Type, o.Source)
	}
	var d events.CleanupDecision
	if err := json.Unmarshal(o.Data, &d); err != nil {
		return nil, fmt.Errorf("%w: decision: %v", errInvalid, err)
	}
	if d.Verb != verb || d.Namespace != ns || d.Pod != name || d.PodUID != uid {
		return nil, fmt.Errorf("%w: the decision names %s/%s (%s, %s), not the Event's pod", errForged, d.Namespace, d.Pod, d.PodUID, d.Verb)
	}
	want := d.Action
	if want != Delete.String() && want != ForceDelete.String() || verb == VerbForceDeleted {
		want = Delete.String()
		if verb == VerbForceDeleted {
			want = ForceDelete.String()
		}
	}
	payload := events.CleanupDecision{
		Verb: verb, Action: want, Namespace: ns, Pod: name, PodUID: uid,
		Node: bound(d.Node), Phase: bound(d.Phase), PodReason: bound(d.PodReason), Reason: bound(d.Reason), Message: bound(d.Message),
		AgeSeconds: max(d.AgeSeconds, 0), Severity: severity(verb), Time: at,
	}
	if d.Owner != nil {
		payload.Owner = &events.Owner{Kind: bound(d.Owner.Kind), Name: bound(d.Owner.Name)}
	}
	out, err := envelope.New(id, src, events.TypeCleanup, ns+"/"+name, payload, at)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalid, err)
	}
	return &liveAction{at: at, subject: subj, outcome: out, happened: ev.Reason != EventIntent, created: ev.CreationTimestamp.Time,
		in: events.Intent{Actor: Service, Action: verb, Kind: "Pod", Namespace: ns, Name: name, UID: uid}}, nil
}

// refuse logs and counts (opswire_cleanup_recovery_events_rejected_total) a
// removal Event the recovery refused, once per Event: a retried recovery
// lists it again.
func (a *Actuator) refuse(ev *corev1.Event, err error) {
	if !a.refused.First(ev.UID) {
		return
	}
	why := "invalid"
	if errors.Is(err, errForged) {
		why = "forged"
	}
	a.metrics.RecoveryRejected.WithLabelValues(why).Inc()
	a.log.Warn().Err(err).Str("event", ev.Namespace+"/"+ev.Name).Str("reason", ev.Reason).
		Str("reportingController", ev.ReportingController).Str("host", ev.Source.Host).
		Msg("removal Event refused by the recovery (not counted, nothing published)")
}

func bound(s string) string {
	if len(s) > maxText {
		return strings.ToValidUTF8(s[:maxText], "")
	}
	return s
}

// LiveActions is the API's record of this actor's recent removals
// (actuate.Recovery.Live), which does not depend on NATS: a leader that
// removed pods during a NATS outage and was SIGKILLed with their audits
// queued left only its Kubernetes Events. It lists opswire-cleanup's Events
// on pods (one LIST, all namespaces) and reads the removal Events whose
// action time is since the given time:
//
//   - an outcome Event (CleanupDeleted, CleanupForceDeleted,
//     CleanupDeletionRequested): the removal happened;
//   - a CleanupIntent Event without its outcome Event (the recorder is
//     asynchronous: a SIGKILL loses what it has not sent): the pod is
//     re-read (Happened); gone or replaced means the removal happened,
//     otherwise it is Pending (it counts, nothing is published); but for
//     an Event created before this term, the same pod within the
//     late-commit horizon of the Event's creation is not decided yet (an
//     earlier leader's write in doubt may still commit): an error, and the
//     recovery retries, as for an OPS intent.
//
// An intent and an outcome Event of the same removal (pod UID and verb: the
// outcome id cleanup/<uid>/<verb>) are one action, at the latest slot time
// (a retried removal counts at the attempt that went through). Events are
// not authenticated (anyone who may create Events in a namespace can write
// one under opswire-cleanup's name): each is checked and its outcome
// rebuilt by readRemovalEvent, never replayed from its annotations; a
// refused one is logged and counted once (refuse,
// opswire_cleanup_recovery_events_rejected_total), and so is one whose pod
// re-read fails for good (actuate.ErrUnverifiable) rather than failing the
// recovery; of several Events of one action, the latest supplies its time
// and outcome.
// An outcome Event's action carries its intent as Check: SeedAndRecover
// re-reads the pod (Happened) before publishing one OPS does not know, so a
// forged "deleted" of a pod still there with that UID is only counted, never
// published (a made-up UID reads as the pod replaced: docs/cleanup.md's
// residual).
// An Event without the annotations (written by an older version) is left out.
func (a *Actuator) LiveActions(ctx context.Context, since time.Time) ([]actuate.LiveAction, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("source", EventSource),
		fields.OneTermEqualSelector("involvedObject.kind", "Pod")).String()
	// Events have no watch cache: the LIST is read from etcd. Pages bound
	// each call's work; each gets at least listEventsTimeout.
	var items []corev1.Event
	opts := metav1.ListOptions{FieldSelector: sel, Limit: listEventsPage}
	for {
		list, err := actuate.Call(ctx, max(a.cfg.APITimeout, listEventsTimeout), func(ctx context.Context) (*corev1.EventList, error) {
			return a.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, opts)
		})
		if err != nil {
			a.metrics.APIErrors.WithLabelValues("list_events").Inc()
			return nil, fmt.Errorf("list opswire-cleanup's Events on pods: %w", err)
		}
		items = append(items, list.Items...)
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	now := a.cfg.WindowNow()
	byID := map[string]*liveAction{}
	var order []string
	for i := range items {
		ev := &items[i]
		if removalVerb(ev.Reason) == "" || ev.Annotations[AnnotationIntent] == "" && ev.Annotations[AnnotationActionTime] == "" {
			continue
		}
		la, err := a.readRemovalEvent(ev, now)
		if err != nil {
			a.refuse(ev, err)
			continue
		}
		la.event = ev
		if la.at.Before(since) {
			continue
		}
		id := la.outcome.ID
		act, ok := byID[id]
		if !ok {
			byID[id] = la
			order = append(order, id)
			continue
		}
		if la.at.After(act.at) {
			// The outcome is the one of the Event whose time counts.
			act.at, act.outcome, act.event = la.at, la.outcome, la.event
		}
		act.happened = act.happened || la.happened
		if la.created.After(act.created) {
			act.created = la.created
		}
	}
	var out []actuate.LiveAction
	for _, id := range order {
		act := byID[id]
		la := actuate.LiveAction{Time: act.at, Subject: act.subject, Outcome: act.outcome}
		if act.happened {
			// An outcome Event is a claim anyone could have written: the
			// live pod is checked before its outcome is published, only
			// for a removal OPS does not know (SeedAndRecover).
			in := act.in
			la.Check = &in
		} else {
			// The writes follow their CleanupIntent Event, so they were
			// sent after its creation: until the late-commit horizon of
			// that time the same pod is no proof that they did not happen
			// (Happened), for an Event created before this term (an
			// earlier leader's). One created since cannot be an earlier
			// term's write in doubt, and is not waited for: Events are
			// not authenticated, and one written on and on must not hold
			// the recovery back for ever.
			in := act.in
			if !act.created.After(a.started) {
				in.Time = act.created
			}
			ok, err := a.Happened(ctx, in)
			if errors.Is(err, actuate.ErrUnverifiable) {
				a.refuse(act.event, fmt.Errorf("%w: %w", errInvalid, err))
				continue
			}
			if err != nil {
				return nil, err
			}
			la.Pending = !ok
		}
		out = append(out, la)
	}
	return out, nil
}

// Recovery is what a new leader's SeedAndRecover reads back with: this
// actor's intents and outcomes, Happened, LiveActions, the audit publisher
// and the late-commit horizon, so an intent whose write Happened shows (the
// old leader's removal in doubt, committed late) counts in the window from
// the read that showed it, at most the horizon after its intent, not from
// the intent: as the old leader counts a write in doubt from its answer.
func (a *Actuator) Recovery() actuate.Recovery {
	return actuate.Recovery{Intents: actuate.IntentSubjects(a.cfg.Cluster, Service), Outcomes: ActionSubjects(a.cfg.Cluster),
		Happened: a.Happened, Audit: a.audit, Live: a.LiveActions, LateCommit: a.horizon()}
}

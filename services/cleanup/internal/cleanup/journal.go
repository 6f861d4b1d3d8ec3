package cleanup

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
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
// outcome message); AnnotationActionTime the time the deletion slot was
// taken, on the actor's clock (RFC 3339, nanoseconds), which is when the
// action counts in the rate window.
const (
	AnnotationIntent     = "opswire.io/cleanup-intent"
	AnnotationActionTime = "opswire.io/cleanup-action-time"
)

// journalAnnotations are the annotations of a removal's Events: the intent
// event's payload (the events.Intent, as JSON) and the slot's time.
func journalAnnotations(intent envelope.Event, at time.Time) map[string]string {
	return map[string]string{AnnotationIntent: string(intent.Data), AnnotationActionTime: at.UTC().Format(time.RFC3339Nano)}
}

// journalEvent writes the CleanupIntent Event of a removal synchronously
// (one API call, within APITimeout), before the write. It is the write-ahead
// record when OPS did not store the intent: a Kubernetes Event does not
// depend on NATS and outlives the deleted pod, so a new leader finds the
// removal there even when this leader is SIGKILLed before NATS returns
// (LiveActions). An error holds the removal back.
func (a *Actuator) journalEvent(ctx context.Context, live *corev1.Pod, verb string, ann map[string]string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", live.Name, now.UnixNano()), Namespace: live.Namespace, Annotations: ann},
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
//     otherwise it is Pending (it counts, nothing is published).
//
// An intent and an outcome Event of the same removal (pod UID and verb: the
// outcome id cleanup/<uid>/<verb>) are one action, at the time the slot was
// taken. Each comes with its outcome message, exactly as journaled (the
// annotation), so its id is the lost original's. An Event without the
// annotations (written by an older version) is left out.
func (a *Actuator) LiveActions(ctx context.Context, since time.Time) ([]actuate.LiveAction, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("source", EventSource),
		fields.OneTermEqualSelector("involvedObject.kind", "Pod")).String()
	list, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.EventList, error) {
		return a.client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: sel})
	})
	if err != nil {
		a.metrics.APIErrors.WithLabelValues("list_events").Inc()
		return nil, fmt.Errorf("list opswire-cleanup's Events on pods: %w", err)
	}
	type action struct {
		at       time.Time
		in       events.Intent
		happened bool
	}
	byID := map[string]*action{}
	var order []string
	for i := range list.Items {
		ev := &list.Items[i]
		switch ev.Reason {
		case EventDeleted, EventForceDeleted, EventDeletionRequested, EventIntent:
		default:
			continue
		}
		if ev.Source.Component != EventSource {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ev.Annotations[AnnotationActionTime])
		if err != nil || at.Before(since) {
			continue
		}
		var in events.Intent
		if err := json.Unmarshal([]byte(ev.Annotations[AnnotationIntent]), &in); err != nil || in.Outcome.ID == "" ||
			in.UID != string(ev.InvolvedObject.UID) {
			a.log.Warn().Err(err).Str("event", ev.Namespace+"/"+ev.Name).Msg("removal Event without a readable intent: ignored")
			continue
		}
		act, ok := byID[in.Outcome.ID]
		if !ok {
			act = &action{at: at, in: in}
			byID[in.Outcome.ID] = act
			order = append(order, in.Outcome.ID)
		}
		if at.Before(act.at) {
			act.at = at
		}
		act.happened = act.happened || ev.Reason != EventIntent
	}
	var out []actuate.LiveAction
	for _, id := range order {
		act := byID[id]
		if !act.happened {
			ok, err := a.Happened(ctx, act.in)
			if err != nil {
				return nil, err
			}
			act.happened = ok
		}
		o := act.in.Outcome
		out = append(out, actuate.LiveAction{Time: act.at, Subject: o.Subject, Pending: !act.happened,
			Outcome: envelope.Event{ID: o.ID, Source: o.Source, Type: o.Type, Time: o.Time, Subject: o.Object, Data: o.Data}})
	}
	return out, nil
}

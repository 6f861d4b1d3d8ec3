package cordon

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opswire/opswire/shared/events"
)

// markedAt marks a node as opswire's cordon decided on version rv at time at.
func markedAt(rv string, at time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Labels[events.LabelAutoCordon] = MarkLabelValue
		b, _ := json.Marshal(Mark{Effects: []string{EffectCordon}, Reason: "test", Time: at, RV: rv})
		n.Annotations = map[string]string{events.AnnotationAutoCordon: string(b)}
		n.Spec.Unschedulable = true
	}
}

// TestLiveReleasesRefuseEventsOfANodeStillMarked: Events are not
// authenticated, so a release Event (OpswireUncordoned,
// OpswireCordonHandedOver) is checked against the live node before the
// recovery rebuilds its audit and counts it. A release removes the mark: a
// node that still carries a mark written before the Event (decided on a
// version no newer than the one the Event names, or at a time before the
// Event was created) was not released by it, and the Event is refused,
// logged and counted once. A mark written after the Event (released, then
// cordoned again) and a node without a mark leave the Event standing.
func TestLiveReleasesRefuseEventsOfANodeStillMarked(t *testing.T) {
	markTime := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	event := func(name, node, reason, rv string, created time.Time) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name, UID: types.UID("ev-" + name),
			CreationTimestamp: metav1.NewTime(created)},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID("uid-" + node), ResourceVersion: rv},
			Reason:         reason, Message: "opswire " + map[string]string{EventUncordoned: VerbUncordoned, EventHandedOver: VerbHandedOver}[reason] + " (cordon): forged",
			Source: corev1.EventSource{Component: EventSource, Host: "r1"}, Count: 1, LastTimestamp: metav1.NewTime(created)}
	}
	objs := []runtime.Object{
		apiNode("held", markedAt("30", markTime)),
		apiNode("again", markedAt("30", markTime)),
		apiNode("free"),
		// The node still marked, the Event naming the node's current version.
		event("current-rv", "held", EventUncordoned, "41", now.Add(-time.Minute)),
		// The node still marked, the Event naming an older version than the
		// mark's, created after the mark was written.
		event("old-rv", "held", EventUncordoned, "7", markTime.Add(time.Minute)),
		event("handover", "held", EventHandedOver, "41", now.Add(-time.Minute)),
		// Released at version 7 before the mark (decided on 30) was written.
		event("before-mark", "again", EventUncordoned, "7", markTime.Add(-time.Minute)),
		// An unmarked node: nothing contradicts the Event.
		event("unmarked", "free", EventUncordoned, "7", now.Add(-time.Minute)),
	}
	h := newHarness(t, seedPolicy(EffectCordon), false, Fleet{Managed: 10}, objs...)
	releases := func() []string {
		t.Helper()
		live, err := h.act.LiveActions(context.Background(), now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, la := range live {
			var d events.CordonDecision
			if err := json.Unmarshal(la.Outcome.Data, &d); err != nil {
				t.Fatal(err)
			}
			if d.Verb != VerbCordoned {
				ids = append(ids, la.Outcome.ID)
			}
		}
		sort.Strings(ids)
		return ids
	}
	want := []string{"cordon/uid-again/uncordoned/7", "cordon/uid-free/uncordoned/7"}
	for attempt := range 2 { // a retried recovery lists the Events again
		got := releases()
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
			t.Fatalf("attempt %d: releases %v, want %v", attempt, got, want)
		}
		if v := testutil.ToFloat64(h.m.RecoveryRejected.WithLabelValues(rejectedForged)); v != 3 {
			t.Fatalf("attempt %d: %v Events refused, want 3 (counted once each)", attempt, v)
		}
	}
}

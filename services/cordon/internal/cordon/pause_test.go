package cordon

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/pause"
)

func TestPausedActuatorWritesNothingAndAnnouncesOncePerPause(t *testing.T) {
	tests := []struct {
		name string
		node func() *corev1.Node
		pods int
		want Action
	}{
		{"cordon held back", func() *corev1.Node { return apiNode("a") }, 100, ActionCordon},
		{"uncordon held back", func() *corev1.Node { return apiNode("a", ours(EffectCordon)) }, 10, ActionUncordon},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.node()
			h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", tc.pods)...)...)
			p := &actuatetest.Pause{Rec: pause.Record{By: "sre", Reason: "incident", Since: time.Unix(100, 0)}, On: true}
			h.act.cfg.Pause = p
			state := mirrorOf(n, tc.pods)
			marked := h.ledger.Marked(state)
			d := Evaluate(h.act.cfg.Policy, state, marked)
			if d.Action != tc.want {
				t.Fatalf("decision %s, want %s", d.Action, tc.want)
			}
			for range 3 {
				out, err := h.act.Apply(context.Background(), state, marked, d)
				if err != nil || out.RequeueAfter <= 0 || out.RequeueAfter > time.Second {
					t.Fatalf("Apply = %+v, %v; want a requeue within 1 s", out, err)
				}
			}
			if w := h.writes(); len(w) != 0 {
				t.Fatalf("paused actuator wrote %v", w)
			}
			msgs := decisions(t, h.pub)
			if len(msgs) != 1 || msgs[0].Subject != "ops.prod.cordon.skipped.a" || msgs[0].D.Code != pause.Reason ||
				msgs[0].D.Action != string(tc.want) || !strings.Contains(msgs[0].D.Reason, "paused by sre") {
				t.Fatalf("published %+v, want one skipped/paused", msgs)
			}
			// A new pause is announced again.
			p.Rec.Since = time.Unix(200, 0)
			if _, err := h.act.Apply(context.Background(), state, marked, d); err != nil {
				t.Fatal(err)
			}
			if got := len(decisions(t, h.pub)); got != 2 {
				t.Fatalf("%d messages after a second pause, want 2", got)
			}
			// Resumed: the decision is applied.
			p.On = false
			if _, err := h.act.Apply(context.Background(), state, marked, d); err != nil {
				t.Fatal(err)
			}
			if w := h.writes(); len(w) != 1 || w[0].GetVerb() != "patch" {
				t.Fatalf("writes after resume = %v, want one patch", w)
			}
		})
	}
}

// A held node labelled donotcordon is announced while paused, without an Event (a write).
func TestPausedHeldNodeRecordsNoEvent(t *testing.T) {
	n := apiNode("a", ours(EffectCordon))
	n.Labels[events.LabelDoNotCordon] = ""
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
	h.act.cfg.Pause = &actuatetest.Pause{Rec: pause.Record{Since: time.Unix(1, 0)}, On: true}
	state := mirrorOf(n, 100)
	marked := h.ledger.Marked(state)
	d := Evaluate(h.act.cfg.Policy, state, marked)
	if d.Code != CodeDoNotCordonHeld {
		t.Fatalf("decision %+v, want %s", d, CodeDoNotCordonHeld)
	}
	if _, err := h.act.Apply(context.Background(), state, marked, d); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-h.rec.Events:
		t.Fatalf("Event while paused: %s", ev)
	default:
	}
	if msgs := decisions(t, h.pub); len(msgs) != 1 || msgs[0].D.Code != CodeDoNotCordonHeld {
		t.Fatalf("published %+v, want the donotcordon-held announcement", msgs)
	}
}

package cleanup

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/pause"
)

func TestPausedActuatorRemovesNothingAndAnnouncesOncePerPause(t *testing.T) {
	tests := []struct {
		name  string
		state *events.PodState
		live  *corev1.Pod
		want  []string
	}{
		{"delete", pod(failed("Evicted")), livePod(), []string{"delete pods"}},
		{"force delete", pod(deleting(t0.Add(-6 * time.Minute))), livePod(liveDeleting), []string{"delete pods"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, testPolicy(), false, nil, tc.live)
			p := &actuatetest.Pause{Rec: pause.Record{By: "sre", Since: time.Unix(100, 0), Until: t0.Add(30 * time.Second)}, On: true}
			r.act.cfg.Pause = p
			d := testPolicy().Decide(tc.state, Facts{Now: t0})
			for range 3 {
				out, err := r.act.Handle(context.Background(), tc.state, d, Facts{Now: t0})
				if err != nil || out.RequeueAfter != time.Second {
					t.Fatalf("Handle = %+v, %v; want a requeue in 1 s", out, err)
				}
			}
			if w := r.writes(); len(w) != 0 {
				t.Fatalf("paused actuator wrote %v", w)
			}
			if ev := r.eventsSeen(); len(ev) != 0 {
				t.Fatalf("paused actuator recorded Events %v", ev)
			}
			msgs := r.pub.All()
			got := opsSummary(t, msgs)
			if len(got) != 1 || !strings.HasPrefix(got[0], "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/paused/") ||
				!strings.Contains(string(msgs[0].Data), "paused by sre") {
				t.Fatalf("published %v, want one skipped/paused", got)
			}
			p.Rec.Since = time.Unix(200, 0) // another pause: announced again, with its own id
			if _, err := r.act.Handle(context.Background(), tc.state, d, Facts{Now: t0}); err != nil {
				t.Fatal(err)
			}
			if got := opsSummary(t, r.pub.All()); len(got) != 2 || got[0] == got[1] {
				t.Fatalf("after a second pause published %v", got)
			}
			p.On = false
			if _, err := r.act.Handle(context.Background(), tc.state, d, Facts{Now: t0}); err != nil {
				t.Fatal(err)
			}
			if w := r.writes(); strings.Join(w, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("writes after resume = %v, want %v", w, tc.want)
			}
		})
	}
}

// A skip while paused is published but records no Kubernetes Event (a write).
func TestPausedSkipRecordsNoEvent(t *testing.T) {
	state := pod(failed("Evicted"))
	r := newRig(t, testPolicy(), false, nil, livePod())
	r.act.cfg.Pause = &actuatetest.Pause{Rec: pause.Record{Since: time.Unix(1, 0)}, On: true}
	d := Decision{Action: Skip, Want: Delete, Reason: "protected", Message: "namespace excluded"}
	if _, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); err != nil {
		t.Fatal(err)
	}
	if ev := r.eventsSeen(); len(ev) != 0 {
		t.Fatalf("Events while paused: %v", ev)
	}
	if got := opsSummary(t, r.pub.All()); len(got) != 1 {
		t.Fatalf("published %v, want the skip", got)
	}
}

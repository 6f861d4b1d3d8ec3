package dispatch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// TestReplayDeliversDeadLettersOnce: dead letters of a wrong secret stay in
// the DLQ while the secret is still wrong (a replay that fails again loses
// nothing), are delivered in one card once it is fixed, and a second replay
// sends nothing.
func TestReplayDeliversDeadLettersOnce(t *testing.T) {
	e := newEnv(t, notifierConfig())
	srv := feishutest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddBot("tok-replay", feishutest.Bot{Secret: "right"})
	routes := []config.Route{fastRoute("ops", "bot")}
	eng := e.start(routes, []dispatch.Receiver{feishuReceiver(t, "bot", u, "wrong", "")}, nil)
	var ps []published
	for i := 0; i < 4; i++ {
		ps = append(ps, e.publishCleanup(i, events.SeverityWarning))
	}
	e.waitSettled("dead-lettered and acked")
	if got := len(e.deadLetters()); got != 4 {
		t.Fatalf("%d dead letters, want 4", got)
	}
	dl := dispatch.StreamDeadLetters{JS: e.js}

	res := eng.d.Replay(context.Background(), dl, "bot")
	if res.DeadLetters != 4 || res.Failed != 4 || res.Delivered != 0 || res.Error == "" {
		t.Fatalf("replay with the wrong secret = %+v, want 4 failed", res)
	}
	if got := len(e.deadLetters()); got != 4 {
		t.Fatalf("%d dead letters after a failed replay, want all 4 kept", got)
	}
	eng.stop()

	fixed := e.start(routes, []dispatch.Receiver{feishuReceiver(t, "bot", u, "right", "")}, nil)
	res = fixed.d.Replay(context.Background(), dl, "bot")
	if res.DeadLetters != 4 || res.Events != 4 || res.Delivered != 4 || res.Cards != 1 || res.Failed != 0 {
		t.Fatalf("replay after the fix = %+v, want 4 delivered in 1 card", res)
	}
	cards := srv.Cards("tok-replay")
	if len(cards) != 1 || !strings.Contains(cards[0].Text(), "**4** cleanup results") {
		t.Fatalf("cards %d, want 1 accounting for the 4 events", len(cards))
	}
	if got := len(e.deadLetters()); got != 0 {
		t.Errorf("%d dead letters left after delivery", got)
	}
	for _, p := range ps {
		rec, err := (&dispatch.KVDelivered{KV: e.kv}).State(context.Background(), dispatch.DeliveredKey(cluster, "ops", "bot", p.id))
		if err != nil || rec != dispatch.RecordDelivered {
			t.Errorf("%s record %q (%v), want delivered", p.id, rec, err)
		}
	}
	res = fixed.d.Replay(context.Background(), dl, "bot")
	if res.DeadLetters != 0 || res.Delivered != 0 {
		t.Errorf("second replay = %+v, want nothing", res)
	}
	if got := len(srv.Cards("tok-replay")); got != 1 {
		t.Errorf("%d cards after a second replay, want still 1", got)
	}
	eventually(t, 5*time.Second, "the replayed outcome", func() bool {
		for _, o := range e.outcomesOf("bot", dispatch.OutcomeDelivered) {
			if o.Reason == "replayed" && o.Events == 4 {
				return true
			}
		}
		return false
	})
}

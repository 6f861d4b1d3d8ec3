package dispatch_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/slack"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/testkit"
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
	testkit.Eventually(t, 5*time.Second, "the replayed outcome", func() bool {
		for _, o := range e.outcomesOf("bot", dispatch.OutcomeDelivered) {
			if o.Reason == "replayed" && o.Events == 4 {
				return true
			}
		}
		return false
	})
}

// heldHook is a webhook receiver that refuses everything (400: dead-lettered)
// until accept, then counts every event of a card at its arrival (the bot
// posts what it has, whether or not the sender still waits for the answer),
// signals arrived, and answers only when release is closed.
type heldHook struct {
	srv     *httptest.Server
	refuse  atomic.Bool
	arrived chan struct{}
	release chan struct{}
	mu      sync.Mutex
	ids     map[string]int
}

func newHeldHook(t *testing.T) *heldHook {
	h := &heldHook{arrived: make(chan struct{}, 10), release: make(chan struct{}), ids: map[string]int{}}
	h.refuse.Store(true)
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if h.refuse.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var p webhook.Payload
		_ = json.Unmarshal(body, &p)
		h.mu.Lock()
		for _, ev := range p.Events {
			h.ids[ev.ID]++
		}
		h.mu.Unlock()
		h.arrived <- struct{}{}
		select {
		case <-h.release:
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// sentOnce fails t for every event of ps the hook did not get exactly once.
func (h *heldHook) sentOnce(t *testing.T, ps []published) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range ps {
		if h.ids[p.id] != 1 {
			t.Errorf("event %s reached the receiver %d times, want 1", p.id, h.ids[p.id])
		}
	}
}

// TestReplayOverlappingRequestsSendOnce: a second replay request for a
// receiver while its first replay has a card at the bot (an operator whose
// `nats req` timed out asks again) is refused at once, says why, and sends
// nothing; the first delivers every event once. Without the one-at-a-time
// rule both read the same dead letters, find no record and both send.
func TestReplayOverlappingRequestsSendOnce(t *testing.T) {
	e := newEnv(t, notifierConfig())
	h := newHeldHook(t)
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.srv.URL)}, nil)
	var ps []published
	for i := 0; i < 3; i++ {
		ps = append(ps, e.publishCleanup(i, events.SeverityWarning))
	}
	e.waitSettled("dead-lettered and acked")
	if got := len(e.deadLetters()); got != 3 {
		t.Fatalf("%d dead letters, want 3", got)
	}
	h.refuse.Store(false) // the cause is fixed
	dl := dispatch.StreamDeadLetters{JS: e.js}

	first := make(chan dispatch.ReplayResult, 1)
	go func() { first <- eng.d.Replay(context.Background(), dl, "hook") }()
	<-h.arrived // the first replay's card is at the bot
	second := make(chan dispatch.ReplayResult, 1)
	go func() { second <- eng.d.Replay(context.Background(), dl, "hook") }()
	var res2 dispatch.ReplayResult
	select {
	case res2 = <-second:
	case <-h.arrived: // the second replay sent too; let both finish
		res2 = dispatch.ReplayResult{Error: "sent while the first replay ran"}
	case <-time.After(30 * time.Second):
		t.Fatal("the second replay neither answered nor sent")
	}
	close(h.release)
	res1 := <-first
	if res2.Error != dispatch.ReplayRunningError("hook") || res2.DeadLetters != 0 {
		t.Errorf("overlapping replay = %+v, want refused with %q", res2, dispatch.ReplayRunningError("hook"))
	}
	if res1.Delivered != 3 || res1.Cards != 1 || res1.Failed != 0 {
		t.Errorf("first replay = %+v, want 3 delivered in 1 card", res1)
	}
	h.sentOnce(t, ps)
	if res := eng.d.Replay(context.Background(), dl, "hook"); res.Error != "" || res.DeadLetters != 0 {
		t.Errorf("replay after both answered = %+v, want it running and nothing left", res)
	}
}

// TestReplayCutByShutdownIsNotSentAgain: when the replay's context ends
// (SIGTERM) while a card is at the bot, that request runs to its answer and
// the card is recorded and its dead letters removed, so the next replay does
// not send it again; a card not started yet is not sent and keeps its dead
// letters for the next replay, which sends it once.
func TestReplayCutByShutdownIsNotSentAgain(t *testing.T) {
	warning := config.Route{Name: "warn", Receivers: []string{"hook"}, Severities: []string{"warning"},
		GroupWait: config.D(20 * time.Millisecond), GroupInterval: config.D(50 * time.Millisecond)}
	critical := warning
	critical.Name, critical.Severities = "crit", []string{"critical"}
	for _, tc := range []struct {
		name       string
		severities []events.Severity // one card per severity
		wantFirst  int               // events the cut replay delivers
	}{
		{"card at the bot", []events.Severity{events.SeverityWarning, events.SeverityWarning}, 2},
		{"next card not started", []events.Severity{events.SeverityCritical, events.SeverityWarning}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			h := newHeldHook(t)
			eng := e.start([]config.Route{critical, warning}, []dispatch.Receiver{webhookReceiver(t, "hook", h.srv.URL)}, nil)
			var ps []published
			for i, sev := range tc.severities {
				ps = append(ps, e.publishCleanup(i, sev))
			}
			e.waitSettled("dead-lettered and acked")
			h.refuse.Store(false)
			dl := dispatch.StreamDeadLetters{JS: e.js}

			ctx, cancel := context.WithCancel(context.Background()) // the dispatcher's context
			done := make(chan dispatch.ReplayResult, 1)
			go func() { done <- eng.d.Replay(ctx, dl, "hook") }()
			<-h.arrived
			cancel() // SIGTERM while the first card is at the bot
			close(h.release)
			first := <-done
			if first.Delivered != tc.wantFirst || first.Cards != 1 || first.Failed != len(ps)-tc.wantFirst {
				t.Errorf("replay cut by shutdown = %+v, want %d delivered in 1 card, %d failed", first, tc.wantFirst, len(ps)-tc.wantFirst)
			}
			if got := len(e.deadLetters()); got != len(ps)-tc.wantFirst {
				t.Errorf("%d dead letters after the cut replay, want %d", got, len(ps)-tc.wantFirst)
			}
			second := eng.d.Replay(context.Background(), dl, "hook")
			if second.Delivered != len(ps)-tc.wantFirst || second.Failed != 0 {
				t.Errorf("next replay = %+v, want the %d left delivered", second, len(ps)-tc.wantFirst)
			}
			h.sentOnce(t, ps)
		})
	}
}

// TestReplayHonoursRetryAfter: after a 429 the replay waits at least its
// Retry-After before the next attempt, as the live path does (sooner is
// refused again and counts against the hook); a Retry-After longer than a
// replay waits fails the card at once and keeps its dead letter.
func TestReplayHonoursRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name          string
		retryAfter    string
		wantDelivered int
		wantRequests  int
	}{
		{"waited", "2", 1, 2},
		{"longer than a replay waits", "120", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			var phase atomic.Int32 // 0: hook gone (dead letters); 1: one 429 with Retry-After; then ok
			var mu sync.Mutex
			var times []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				if phase.Load() == 0 {
					w.WriteHeader(http.StatusNotFound)
					_, _ = io.WriteString(w, "no_service")
					return
				}
				mu.Lock()
				times = append(times, time.Now())
				mu.Unlock()
				if phase.CompareAndSwap(1, 2) {
					w.Header().Set("Retry-After", tc.retryAfter)
					w.WriteHeader(http.StatusTooManyRequests)
					_, _ = io.WriteString(w, "rate_limited")
					return
				}
				_, _ = io.WriteString(w, "ok")
			}))
			t.Cleanup(srv.Close)
			sink, err := slack.New(slack.Options{URL: config.Secret(srv.URL)})
			if err != nil {
				t.Fatal(err)
			}
			recv := dispatch.Receiver{Name: "slack", Sink: sink, Limiter: limiter(), Timeout: 5 * time.Second}
			eng := e.start([]config.Route{fastRoute("ops", "slack")}, []dispatch.Receiver{recv}, nil)
			e.publishCleanup(0, events.SeverityWarning)
			e.waitSettled("dead-lettered and acked")
			phase.Store(1)
			res := eng.d.Replay(context.Background(), dispatch.StreamDeadLetters{JS: e.js}, "slack")
			if res.Delivered != tc.wantDelivered || res.Failed != 1-tc.wantDelivered {
				t.Fatalf("replay = %+v, want %d delivered", res, tc.wantDelivered)
			}
			if tc.wantDelivered == 0 && !strings.Contains(res.Error, "Retry-After") {
				t.Errorf("replay error %q does not say the receiver asked to wait", res.Error)
			}
			if got := len(e.deadLetters()); got != 1-tc.wantDelivered {
				t.Errorf("%d dead letters left, want %d", got, 1-tc.wantDelivered)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(times) != tc.wantRequests {
				t.Fatalf("%d requests, want %d", len(times), tc.wantRequests)
			}
			if len(times) == 2 {
				if gap := times[1].Sub(times[0]); gap < 2*time.Second {
					t.Errorf("replay retried %v after a 429 with Retry-After: 2, want at least 2s", gap.Round(time.Millisecond))
				}
			}
		})
	}
}

package dispatch_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// TestAckOnlyWhenEveryReceiverSettled: a message routed to several
// receivers stays un-acked while any one of them has not settled it (the
// request is in flight, or it keeps failing and is retried), and is acked
// once, without a redelivery, when the last one has.
func TestAckOnlyWhenEveryReceiverSettled(t *testing.T) {
	tests := []struct {
		name    string
		routes  func(fast, slow string) []config.Route
		failing bool // the slow receiver answers 503 (retried) instead of holding the request
	}{
		{"two receivers on one route, one hangs", func(f, s string) []config.Route {
			return []config.Route{fastRoute("ops", f, s)}
		}, false},
		{"two receivers on one route, one retries", func(f, s string) []config.Route {
			return []config.Route{fastRoute("ops", f, s)}
		}, true},
		{"two routes (continue), the second hangs", func(f, s string) []config.Route {
			r1 := fastRoute("first", f)
			r1.Continue = true
			return []config.Route{r1, fastRoute("second", s)}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			fast, slow := newHook(t), newHook(t).gated(tc.failing)
			eng := e.start(tc.routes("fast", "slow"), []dispatch.Receiver{
				webhookReceiver(t, "fast", fast.URL+"/fast"), webhookReceiver(t, "slow", slow.URL+"/slow")}, nil)
			p := e.publishCleanup(1, events.SeverityWarning)

			testkit.Eventually(t, 5*time.Second, "the fast receiver delivered", func() bool { return len(e.outcomesOf("fast", dispatch.OutcomeDelivered)) == 1 })
			// The slow receiver has the card (twice, when it is retrying), not settled.
			for i := 0; i < 1+btoi(tc.failing); i++ {
				select {
				case <-slow.arrived:
				case <-time.After(5 * time.Second):
					t.Fatal("the slow receiver got no request")
				}
			}
			ci := e.info()
			if ci.NumAckPending != 1 || ci.AckFloor.Stream >= p.seq {
				t.Fatalf("acked before every receiver settled: ack pending %d, ack floor %d, seq %d", ci.NumAckPending, ci.AckFloor.Stream, p.seq)
			}
			if v := value(eng.metrics.Pending); v != 1 {
				t.Errorf("pending gauge %v, want 1", v)
			}

			slow.open()
			ci = e.waitSettled("the message acked after the slow receiver settled")
			if ci.Delivered.Consumer != 1 || ci.Delivered.Stream != p.seq {
				t.Errorf("%d deliveries up to seq %d; want one delivery of seq %d", ci.Delivered.Consumer, ci.Delivered.Stream, p.seq)
			}
			for name, h := range map[string]*hook{"fast": fast, "slow": slow} {
				if _, ids := h.got(); ids[p.id] != 1 || len(ids) != 1 {
					t.Errorf("%s accepted %v, want %s once", name, ids, p.id)
				}
				if !e.seen(routeOf(tc.routes("fast", "slow"), name), name, p.id) {
					t.Errorf("no delivered record for %s", name)
				}
			}
			if v := value(eng.metrics.Pending); v != 0 {
				t.Errorf("pending gauge %v after the ack, want 0", v)
			}
			if retried := value(eng.metrics.Attempts.WithLabelValues("slow", "retryable", "server_error")); (retried > 0) != tc.failing {
				t.Errorf("%v retryable attempts for slow, failing=%v", retried, tc.failing)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func routeOf(routes []config.Route, receiver string) string {
	for _, r := range routes {
		for _, x := range r.Receivers {
			if x == receiver {
				return r.Name
			}
		}
	}
	return ""
}

// TestMalformedCountedAndTerminated: OPS messages the notifier can never
// deliver are counted and terminated (one MSG_TERMINATED advisory each, no
// redelivery); nothing is sent for them, and the good message behind them
// still goes out.
func TestMalformedCountedAndTerminated(t *testing.T) {
	good, err := envelope.New("x/1", envelope.Source(cluster, "cleanup"), events.TypeCleanup, "ns/p",
		events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := envelope.New("x/2", envelope.Source(cluster, "x"), "io.opswire.ops.unknown.v1", "", map[string]int{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	subj := subject.Ops(cluster, "cleanup", "deleted", "ns", "p")
	tests := []struct {
		name string
		msg  func() *nats.Msg
	}{
		{"no headers", func() *nats.Msg { return &nats.Msg{Subject: subj, Data: []byte(`{"verb":"deleted"}`)} }},
		{"not json", func() *nats.Msg { m := good.Msg(subj); m.Data = []byte("\x00garbage"); return m }},
		{"payload of the wrong shape", func() *nats.Msg { m := good.Msg(subj); m.Data = []byte(`{"verb":7,"pod":[]}`); return m }},
		{"unknown ce-type", func() *nats.Msg { return unknown.Msg(subj) }},
		{"no ce-id", func() *nats.Msg { m := good.Msg(subj); m.Header.Del("ce-id"); return m }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			var terminated atomic.Int32
			sub, err := e.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>", func(*nats.Msg) { terminated.Add(1) })
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			h := newHook(t)
			eng := e.start([]config.Route{fastRoute("all", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)

			e.publishRaw(tc.msg())
			sentinel := e.publishCleanup(2, events.SeverityInfo)
			ci := e.waitSettled("both messages settled")

			testkit.Eventually(t, 5*time.Second, "the termination advisory", func() bool { return terminated.Load() == 1 })
			if v := value(eng.metrics.Messages.WithLabelValues("", "malformed")); v != 1 {
				t.Errorf("malformed count %v, want 1", v)
			}
			if v := value(eng.metrics.Messages.WithLabelValues("", "routed")); v != 1 {
				t.Errorf("routed count %v, want 1 (the sentinel)", v)
			}
			if ci.Delivered.Consumer != 2 {
				t.Errorf("%d deliveries of 2 messages, want no redelivery", ci.Delivered.Consumer)
			}
			if n, ids := h.got(); n != 1 || len(ids) != 1 || ids[sentinel.id] != 1 {
				t.Errorf("receiver got %d requests with %v, want only the sentinel", n, ids)
			}
			if got := terminated.Load(); got != 1 {
				t.Errorf("%d termination advisories, want exactly 1", got)
			}
		})
	}
}

// TestIntentsAckedUnsent: an actor's write-ahead intent
// (ops.<cluster>.cleanup.intent.<ns>.<pod>) is acked without a card and
// counted as an intent; the outcome behind it goes out once.
func TestIntentsAckedUnsent(t *testing.T) {
	e := newEnv(t, notifierConfig())
	h := newHook(t)
	eng := e.start([]config.Route{fastRoute("all", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)

	out, err := envelope.New("cleanup/uid-9/deleted", envelope.Source(cluster, "cleanup"), events.TypeCleanup, "ns/p",
		events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p", Time: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// As actuate.NewIntent builds it (the notifier does not import the
	// write path).
	isubj := subject.Ops(cluster, "cleanup", "intent", "ns", "p")
	intent, err := envelope.New(out.ID+"/intent", out.Source, events.TypeIntent, "ns/p", events.Intent{
		Actor: "cleanup", Action: "deleted", Kind: "Pod", Namespace: "ns", Name: "p", UID: "uid-9",
		Outcome: events.IntentOutcome{Subject: subject.Ops(cluster, "cleanup", "deleted", "ns", "p"), ID: out.ID, Source: out.Source,
			Type: out.Type, Object: out.Subject, Time: out.Time, Data: out.Data}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(intent.Msg(isubj))
	sentinel := e.publishCleanup(2, events.SeverityInfo)
	ci := e.waitSettled("both messages settled")
	if v := value(eng.metrics.Messages.WithLabelValues("", "intent")); v != 1 {
		t.Errorf("intent count %v, want 1", v)
	}
	if v := value(eng.metrics.Messages.WithLabelValues("", "routed")); v != 1 {
		t.Errorf("routed count %v, want 1 (the sentinel)", v)
	}
	if v := value(eng.metrics.Messages.WithLabelValues("", "malformed")); v != 0 {
		t.Errorf("malformed count %v, want 0", v)
	}
	if ci.Delivered.Consumer != 2 {
		t.Errorf("%d deliveries of 2 messages, want no redelivery", ci.Delivered.Consumer)
	}
	if n, ids := h.got(); n != 1 || len(ids) != 1 || ids[sentinel.id] != 1 {
		t.Errorf("receiver got %d requests with %v, want only the sentinel", n, ids)
	}
}

// TestRedeliveredAlreadyDeliveredIsSkipped: a redelivered message whose
// (route, receiver, id) is already recorded in the KV bucket is not sent to
// that receiver again; receivers without a record still get it; a message
// with nothing left is acked at once and counted as a duplicate.
func TestRedeliveredAlreadyDeliveredIsSkipped(t *testing.T) {
	tests := []struct {
		name      string
		recorded  map[string]string // receiver -> route of the existing record
		wantSent  []string
		wantSkip  []string
		duplicate bool
	}{
		{"every receiver recorded", map[string]string{"a": "ops", "b": "ops"}, nil, []string{"a", "b"}, true},
		{"one of two recorded", map[string]string{"a": "ops"}, []string{"b"}, []string{"a"}, false},
		{"recorded under another route", map[string]string{"a": "other", "b": "other"}, []string{"a", "b"}, nil, false},
		{"nothing recorded", nil, []string{"a", "b"}, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			hooks := map[string]*hook{"a": newHook(t), "b": newHook(t)}
			p := e.publishCleanup(1, events.SeverityWarning)
			for recv, rt := range tc.recorded {
				if err := (&dispatch.KVDelivered{KV: e.kv}).Mark(context.Background(), []string{dispatch.DeliveredKey(cluster, rt, recv, p.id)}, dispatch.RecordDelivered); err != nil {
					t.Fatal(err)
				}
			}
			// The first delivery went to a replica that died before acking:
			// it comes back at once (a nak stands in for AckWait expiring).
			var firstDeliveries atomic.Int32
			crashFirst := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
				if md, _ := m.Metadata(); md.NumDelivered == 1 {
					firstDeliveries.Add(1)
					_ = m.Nak()
					return
				}
				d.Handle(ctx, m)
			}
			eng := e.start([]config.Route{fastRoute("ops", "a", "b")},
				[]dispatch.Receiver{webhookReceiver(t, "a", hooks["a"].URL), webhookReceiver(t, "b", hooks["b"].URL)}, crashFirst)

			ci := e.waitSettled("the redelivered message settled")
			if firstDeliveries.Load() != 1 || ci.Delivered.Consumer != 2 {
				t.Fatalf("first deliveries %d, %d deliveries in all; want 1 and 2", firstDeliveries.Load(), ci.Delivered.Consumer)
			}
			for _, recv := range tc.wantSent {
				testkit.Eventually(t, 5*time.Second, recv+" delivered", func() bool { return len(e.outcomesOf(recv, dispatch.OutcomeDelivered)) == 1 })
				if _, ids := hooks[recv].got(); ids[p.id] != 1 {
					t.Errorf("%s accepted %v, want %s once", recv, ids, p.id)
				}
			}
			for _, recv := range tc.wantSkip {
				testkit.Eventually(t, 5*time.Second, recv+" dropped outcome", func() bool { return len(e.outcomesOf(recv, dispatch.OutcomeDropped)) >= 1 })
				if n, _ := hooks[recv].got(); n != 0 {
					t.Errorf("%s got %d requests for an event it already had", recv, n)
				}
				drops := e.outcomesOf(recv, dispatch.OutcomeDropped)
				if len(drops) != 1 || drops[0].Reason != "already_delivered" || drops[0].Route != "ops" || len(drops[0].IDs) != 1 || drops[0].IDs[0] != p.id {
					t.Errorf("%s dropped outcomes %+v, want one already_delivered for %s", recv, drops, p.id)
				}
			}
			wantDup, wantRouted := 0.0, 1.0
			if tc.duplicate {
				wantDup, wantRouted = 1, 0
			}
			if v := value(eng.metrics.Messages.WithLabelValues("", "duplicate")); v != wantDup {
				t.Errorf("duplicate count %v, want %v", v, wantDup)
			}
			if v := value(eng.metrics.Messages.WithLabelValues("", "routed")); v != wantRouted {
				t.Errorf("routed count %v, want %v", v, wantRouted)
			}
			for _, recv := range []string{"a", "b"} {
				if !e.seen("ops", recv, p.id) && (contains(tc.wantSent, recv) || contains(tc.wantSkip, recv)) {
					t.Errorf("no record for %s after the message settled", recv)
				}
			}
		})
	}
}

// TestLostAckIsNotSentTwice: the real crash window. A card is delivered and
// recorded, but the ack never reaches the server; the redelivered messages
// (at once after a nak, or after AckWait) are skipped, so every event
// reaches the receiver exactly once.
func TestLostAckIsNotSentTwice(t *testing.T) {
	tests := []struct {
		name    string
		ackWait time.Duration
		lose    func(m jetstream.Msg) error // what happens instead of the first ack
	}{
		{"redelivered at once", 5 * time.Second, func(m jetstream.Msg) error { return m.Nak() }},
		{"redelivered after AckWait", 300 * time.Millisecond, func(jetstream.Msg) error { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := notifierConfig()
			n.AckWait = config.D(tc.ackWait)
			e := newEnv(t, n)
			h := newHook(t)
			var lost atomic.Int32
			loseFirstAck := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
				if md, _ := m.Metadata(); md.NumDelivered == 1 {
					m = lostAck{Msg: m, lose: tc.lose, lost: &lost}
				}
				d.Handle(ctx, m)
			}
			eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, loseFirstAck)
			var ps []published
			for i := 0; i < 5; i++ {
				ps = append(ps, e.publishCleanup(i, events.SeverityInfo))
			}
			testkit.Eventually(t, 10*time.Second, "5 redeliveries skipped as duplicates", func() bool {
				return value(eng.metrics.Messages.WithLabelValues("", "duplicate")) == 5
			})
			ci := e.waitSettled("every message acked")
			if lost.Load() != 5 || ci.Delivered.Consumer != 10 {
				t.Fatalf("lost %d acks, %d deliveries; want 5 and 10 (each message exactly twice)", lost.Load(), ci.Delivered.Consumer)
			}
			_, ids := h.got()
			for _, p := range ps {
				if ids[p.id] != 1 {
					t.Errorf("event %s reached the receiver %d times, want 1", p.id, ids[p.id])
				}
			}
			// The outcomes travel on core NATS to the test's subscriber: the
			// last may still be on its way when the metric counts it.
			testkit.Eventually(t, 5*time.Second, "5 dropped outcomes", func() bool { return len(e.eventIDs("hook", dispatch.OutcomeDropped)) >= 5 })
			if got := e.eventIDs("hook", dispatch.OutcomeDropped); len(got) != 5 {
				t.Errorf("dropped outcomes for %v, want all 5 events", got)
			}
			if v := value(eng.metrics.Events.WithLabelValues("hook", dispatch.OutcomeDelivered)); v != 5 {
				t.Errorf("delivered events %v, want 5", v)
			}
		})
	}
}

// lostAck is a message whose ack is lost on the way to the server.
type lostAck struct {
	jetstream.Msg
	lose func(jetstream.Msg) error
	lost *atomic.Int32
}

func (m lostAck) Ack() error {
	m.lost.Add(1)
	return m.lose(m.Msg)
}

// TestPermanentFailureDeadLetters: a Feishu error waiting cannot fix (and a
// receiver that stays down past giveUpAfter) dead-letters every event of the
// card to the DLQ stream with the original event and the documented
// headers, after exactly one attempt for permanent errors; the messages are
// acked and recorded as settled, so a redelivery does not start over.
func TestPermanentFailureDeadLetters(t *testing.T) {
	const botSecret, token = "bot-secret-4f1c", "bot-token-8d2a"
	tests := []struct {
		name       string
		bot        feishutest.Bot
		secret     string // the notifier's signing secret
		token      string
		down       bool
		failNext   func(s *feishutest.Server)
		reason     string
		code       int
		onlyOnce   bool
		giveUpFast bool
	}{
		{name: "wrong signing secret", bot: feishutest.Bot{Secret: botSecret}, secret: "not-the-secret", token: token,
			reason: "signature", code: 19021, onlyOnce: true},
		{name: "keyword missing", bot: feishutest.Bot{Keywords: []string{"opswire-alert"}}, token: token,
			reason: "keyword", code: 19024, onlyOnce: true},
		{name: "bot deleted", bot: feishutest.Bot{}, token: "unknown-token",
			reason: "token", code: 19001, onlyOnce: true},
		{name: "bad request", bot: feishutest.Bot{}, token: token,
			failNext: func(s *feishutest.Server) { s.FailNext(1, 200, 9499, "Bad Request") }, reason: "bad_request", code: 9499, onlyOnce: true},
		{name: "down past giveUpAfter", bot: feishutest.Bot{}, token: token, down: true, giveUpFast: true,
			reason: "gave_up_transport"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			if tc.giveUpFast {
				e.settings.GiveUpAfter = 100 * time.Millisecond
			}
			srv := feishutest.NewServer()
			t.Cleanup(srv.Close)
			srv.AddBot(token, tc.bot)
			url := srv.URL + feishutest.HookPrefix + tc.token
			srv.SetDown(tc.down)
			if tc.failNext != nil {
				tc.failNext(srv)
			}
			// Every first ack is lost: the redeliveries must be skipped,
			// not retried (no retry storm, no second error log).
			var lost atomic.Int32
			loseFirstAck := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
				if md, _ := m.Metadata(); md.NumDelivered == 1 {
					m = lostAck{Msg: m, lose: func(m jetstream.Msg) error { return m.Nak() }, lost: &lost}
				}
				d.Handle(ctx, m)
			}
			eng := e.start([]config.Route{fastRoute("ops", "bot")}, []dispatch.Receiver{feishuReceiver(t, "bot", url, tc.secret, "")}, loseFirstAck)
			var ps []published
			for i := 0; i < 3; i++ {
				ps = append(ps, e.publishCleanup(i, events.SeverityCritical))
			}
			testkit.Eventually(t, 10*time.Second, "3 redeliveries skipped", func() bool {
				return value(eng.metrics.Messages.WithLabelValues("", "duplicate")) == 3
			})
			e.waitSettled("every message acked")

			reqs := srv.Requests()
			if tc.onlyOnce && len(reqs) != 1 {
				t.Errorf("%d requests, want exactly 1 (no retry of a permanent error)", len(reqs))
			}
			if !tc.onlyOnce && len(reqs) < 2 {
				t.Errorf("%d requests, want retries before giving up", len(reqs))
			}
			if len(srv.Cards(token)) != 0 {
				t.Errorf("a card was accepted")
			}
			failed := e.outcomesOf("bot", dispatch.OutcomeFailed)
			if len(failed) != 1 || failed[0].Reason != tc.reason || failed[0].Code != tc.code || failed[0].Events != 3 || failed[0].Attempts != len(reqs) {
				t.Errorf("failed outcomes %+v, want one for 3 events, reason %s, code %d, %d attempts", failed, tc.reason, tc.code, len(reqs))
			}
			if v := value(eng.metrics.DeadLetters.WithLabelValues("bot", tc.reason)); v != 3 {
				t.Errorf("dead letters metric %v, want 3", v)
			}
			if v := value(eng.metrics.Deliveries.WithLabelValues("bot", dispatch.OutcomeFailed)); v != 1 {
				t.Errorf("failed deliveries metric %v, want 1", v)
			}

			dl := e.deadLetters()
			if len(dl) != 3 {
				t.Fatalf("%d dead letters, want 3", len(dl))
			}
			bySubject := map[string]jetstream.Msg{}
			for _, m := range dl {
				bySubject[m.Headers().Get(dispatch.HeaderOrigSubject)] = m
			}
			for _, p := range ps {
				m, ok := bySubject[p.subject]
				if !ok {
					t.Errorf("no dead letter for %s", p.subject)
					continue
				}
				h := m.Headers()
				want := map[string]string{
					nats.MsgIdHdr:              "dlq/ops/bot/" + p.id,
					dispatch.HeaderDLQReceiver: "bot",
					dispatch.HeaderDLQRoute:    "ops",
					dispatch.HeaderDLQReason:   tc.reason,
					dispatch.HeaderOrigSubject: p.subject,
					dispatch.HeaderOrigSeq:     strconv.FormatUint(p.seq, 10),
					"ce-id":                    p.id,
					"ce-type":                  events.TypeCleanup,
					"ce-source":                p.msg.Header.Get("ce-source"),
					"ce-specversion":           p.msg.Header.Get("ce-specversion"),
				}
				for k, v := range want {
					if got := h.Get(k); got != v {
						t.Errorf("dead letter header %s = %q, want %q", k, got, v)
					}
				}
				if m.Subject() != "dlq.prod-eu.notifier.bot" {
					t.Errorf("dead letter subject %s", m.Subject())
				}
				if string(m.Data()) != string(p.msg.Data) {
					t.Errorf("dead letter body %s, want the original %s", m.Data(), p.msg.Data)
				}
				errText := h.Get(dispatch.HeaderDLQError)
				if errText == "" || strings.Contains(errText, token) || strings.Contains(errText, botSecret) || strings.Contains(errText, srv.URL) {
					t.Errorf("dead letter error %q: empty or leaks the URL/secret", errText)
				}
				// The dead letter is a valid event: it decodes like the original.
				var d events.CleanupDecision
				if _, err := envelope.Decode(h, m.Data(), events.TypeCleanup, &d); err != nil {
					t.Errorf("dead letter does not decode as an event: %v", err)
				}
				if !e.seen("ops", "bot", p.id) {
					t.Errorf("dead-lettered %s not recorded as settled", p.id)
				}
			}
		})
	}
}

// TestMaxDeliverDeadLetters: a message that keeps coming back without being
// settled (it keeps killing notifiers) is parked in the DLQ with reason
// max_deliver on its last delivery, not sent, and acked.
func TestMaxDeliverDeadLetters(t *testing.T) {
	n := notifierConfig()
	n.MaxDeliver = 3
	e := newEnv(t, n)
	e.settings.MaxDeliver = 3
	h := newHook(t)
	crashes := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
		if md, _ := m.Metadata(); md.NumDelivered < 3 {
			_ = m.Nak()
			return
		}
		d.Handle(ctx, m)
	}
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, crashes)
	p := e.publishCleanup(1, events.SeverityInfo)
	e.waitSettled("the message acked on its last delivery")
	if n, _ := h.got(); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
	if v := value(eng.metrics.Messages.WithLabelValues("", "max_deliver")); v != 1 {
		t.Errorf("max_deliver count %v, want 1", v)
	}
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].Headers().Get(dispatch.HeaderDLQReason) != "max_deliver" || dl[0].Headers().Get("ce-id") != p.id {
		t.Fatalf("dead letters %v, want one max_deliver for %s", dl, p.id)
	}
}

// TestShutdownNaksHeldMessages: on SIGTERM the messages still waiting in a
// group are released at once, not after AckWait, and nothing is sent.
func TestShutdownNaksHeldMessages(t *testing.T) {
	n := notifierConfig()
	n.AckWait = config.D(time.Minute)
	e := newEnv(t, n)
	e.settings.AckWait = time.Minute
	h := newHook(t)
	slowGroup := fastRoute("ops", "hook")
	slowGroup.GroupWait = config.D(time.Hour)
	eng := e.start([]config.Route{slowGroup}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)
	p := e.publishCleanup(1, events.SeverityInfo)
	testkit.Eventually(t, 5*time.Second, "the message held in its group", func() bool { return value(eng.metrics.Pending) == 1 })
	eng.stop()

	m, err := e.cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("message not released for redelivery: %v", err)
	}
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if md.Sequence.Stream != p.seq || md.NumDelivered != 2 {
		t.Errorf("redelivered seq %d delivery %d, want seq %d delivery 2", md.Sequence.Stream, md.NumDelivered, p.seq)
	}
	if n, _ := h.got(); n != 0 {
		t.Errorf("%d requests sent during shutdown", n)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

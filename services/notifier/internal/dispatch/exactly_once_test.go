package dispatch_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/route"
	"github.com/opswire/opswire/services/notifier/internal/service"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// TestDeadLetterWriteFailureDoesNotAck: with the DLQ stream gone, a
// permanently rejected card is neither recorded nor acked: the messages stay
// pending and come back, the failure is counted and logged; once the stream
// exists again the redelivered messages are dead-lettered and acked.
func TestDeadLetterWriteFailureDoesNotAck(t *testing.T) {
	n := notifierConfig()
	n.AckWait = config.D(time.Second)
	e := newEnv(t, n)
	srv := feishutest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddBot("tok-dlq", feishutest.Bot{Secret: "right"})
	if err := e.js.DeleteStream(context.Background(), dispatch.DeadLetterStream); err != nil {
		t.Fatal(err)
	}
	eng := e.start([]config.Route{fastRoute("ops", "bot")}, []dispatch.Receiver{feishuReceiver(t, "bot", u, "wrong", "")}, nil)
	var ps []published
	for i := 0; i < 3; i++ {
		ps = append(ps, e.publishCleanup(i, events.SeverityWarning))
	}
	testkit.Eventually(t, 20*time.Second, "two rounds of failed dead-letter writes", func() bool {
		return value(eng.metrics.DeadLetterErrors.WithLabelValues("bot")) >= 2 && srv.Count(feishutest.CodeSignMismatch) >= 2
	})
	ci := e.info()
	if ci.AckFloor.Stream != 0 || ci.NumAckPending+int(ci.NumPending) != 3 {
		t.Fatalf("ack floor %d, %d pending + %d unacked; want nothing acked and all 3 still there", ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending)
	}
	for _, p := range ps {
		if e.seen("ops", "bot", p.id) {
			t.Errorf("%s recorded as settled although its dead letter was not stored", p.id)
		}
	}
	if len(e.outcomesOf("bot", dispatch.OutcomeFailed)) != 0 {
		t.Errorf("failed outcomes published for events that were not dead-lettered")
	}

	if err := dispatch.EnsureDeadLetterStream(context.Background(), e.js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	e.waitSettledWithin(20*time.Second, "the redelivered messages dead-lettered and acked")
	dl := e.deadLetters()
	ids := map[string]int{}
	for _, m := range dl {
		ids[m.Headers().Get("ce-id")]++
		if m.Headers().Get(dispatch.HeaderDLQReason) != "signature" {
			t.Errorf("dead letter reason %q", m.Headers().Get(dispatch.HeaderDLQReason))
		}
	}
	for _, p := range ps {
		if ids[p.id] != 1 || !e.seen("ops", "bot", p.id) {
			t.Errorf("%s: %d dead letters, recorded %v; want 1 and recorded", p.id, ids[p.id], e.seen("ops", "bot", p.id))
		}
	}
}

// TestRecordsCheckedOnFirstDelivery: a record written earlier (a re-created
// consumer replays the stream, or an id stored again after the duplicate
// window) stops the send even on a message's first delivery.
func TestRecordsCheckedOnFirstDelivery(t *testing.T) {
	e := newEnv(t, notifierConfig())
	h := newHook(t)
	p := e.publishCleanup(1, events.SeverityInfo)
	kd := &dispatch.KVDelivered{KV: e.kv}
	if err := kd.Mark(context.Background(), []string{dispatch.DeliveredKey(cluster, "ops", "hook", p.id)}, dispatch.RecordDelivered); err != nil {
		t.Fatal(err)
	}
	fresh := e.publishCleanup(2, events.SeverityInfo)
	var maxDelivered atomic.Uint64
	watch := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
		if md, _ := m.Metadata(); md.NumDelivered > maxDelivered.Load() {
			maxDelivered.Store(md.NumDelivered)
		}
		d.Handle(ctx, m)
	}
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, watch)
	e.waitSettled("both messages acked")
	testkit.Eventually(t, 5*time.Second, "the fresh event delivered", func() bool { return len(e.outcomesOf("hook", dispatch.OutcomeDelivered)) == 1 })
	if _, ids := h.got(); ids[p.id] != 0 || ids[fresh.id] != 1 {
		t.Errorf("receiver got %v; want only %s", ids, fresh.id)
	}
	if maxDelivered.Load() != 1 {
		t.Errorf("a message was redelivered (%d); the test needs first deliveries only", maxDelivered.Load())
	}
	if v := value(eng.metrics.Messages.WithLabelValues("", "duplicate")); v != 1 {
		t.Errorf("duplicate count %v, want 1", v)
	}
}

// TestShutdownLetsTheRequestInFlightFinish: a SIGTERM while a POST is under
// way does not cut it; its card is recorded and its messages acked, so the
// next replica does not send it again. What was still only grouped is
// released.
func TestShutdownLetsTheRequestInFlightFinish(t *testing.T) {
	n := notifierConfig()
	n.AckWait = config.D(time.Minute)
	e := newEnv(t, n)
	e.settings.AckWait = time.Minute
	h := newHook(t).gated(false)
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)
	p := e.publishCleanup(1, events.SeverityInfo)
	select {
	case <-h.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no request arrived")
	}
	stopped := make(chan struct{})
	go func() { eng.stop(); close(stopped) }()
	time.Sleep(200 * time.Millisecond) // the shutdown is under way
	select {
	case <-stopped:
		t.Fatal("shutdown did not wait for the request in flight")
	default:
	}
	h.open()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not finish")
	}
	if _, ids := h.got(); ids[p.id] != 1 {
		t.Fatalf("receiver accepted %v, want %s once", ids, p.id)
	}
	if !e.seen("ops", "hook", p.id) {
		t.Errorf("delivered card not recorded")
	}
	ci := e.info()
	if ci.AckFloor.Stream != p.seq || ci.NumAckPending != 0 {
		t.Errorf("ack floor %d, %d unacked; want %d acked", ci.AckFloor.Stream, ci.NumAckPending, p.seq)
	}
}

// TestDownReceiverDoesNotStallOthers: with one consumer per receiver (as the
// service runs them), a receiver that is down holds at most its own
// MaxAckPending; the healthy receiver gets every event.
func TestDownReceiverDoesNotStallOthers(t *testing.T) {
	n := notifierConfig()
	n.MaxAckPending = 5
	e := newEnv(t, n)
	healthy := newHook(t)
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(down.Close)
	routes := route.New([]config.Route{fastRoute("ops", "up", "down")}, nil, config.D(0), config.D(0))
	m := dispatch.NewMetrics(prometheus.NewRegistry())
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	var ccs []jetstream.ConsumeContext
	for _, r := range []dispatch.Receiver{webhookReceiver(t, "up", healthy.URL), webhookReceiver(t, "down", down.URL)} {
		cons, err := service.EnsureConsumer(ctx, e.js, cluster, r.Name, n)
		if err != nil {
			t.Fatal(err)
		}
		d := dispatch.New(e.settings, dispatch.Deps{Routes: routes, Receivers: []dispatch.Receiver{r},
			Delivered: e.delivered(), DeadJS: e.js, Core: e.nc, Metrics: m,
			Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
		wg.Add(1)
		go func() { defer wg.Done(); d.Run(ctx) }()
		cc, err := cons.Consume(func(msg jetstream.Msg) { d.Handle(ctx, msg) })
		if err != nil {
			t.Fatal(err)
		}
		ccs = append(ccs, cc)
	}
	t.Cleanup(func() {
		for _, cc := range ccs {
			cc.Stop()
		}
		cancel()
		wg.Wait()
	})
	for i := 0; i < 30; i++ {
		e.publishCleanup(i, events.SeverityInfo)
	}
	testkit.Eventually(t, 20*time.Second, "all 30 events at the healthy receiver", func() bool {
		_, ids := healthy.got()
		return len(ids) == 30
	})
	ci, err := e.js.Consumer(context.Background(), subject.OpsStream, service.ConsumerName(cluster, "down"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := ci.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending > 5 {
		t.Errorf("down receiver holds %d messages, want at most its MaxAckPending 5", info.NumAckPending)
	}
}

// TestGiveUpAfterCountsFromTheFirstAttempt: a card that waited for the
// rate limit before its first attempt still gets giveUpAfter of retries.
func TestGiveUpAfterCountsFromTheFirstAttempt(t *testing.T) {
	e := newEnv(t, notifierConfig())
	e.settings.GiveUpAfter = time.Second
	var attempts atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	r := webhookReceiver(t, "down", down.URL)
	// One request per 1.2 s, the last one just now: the first attempt waits
	// 1.2 s (past giveUpAfter if counted from the dequeue), the second 1.2 s
	// after the first.
	r.Limiter = ratelimit.New(0, ratelimit.Window{Limit: 1, Period: 1200 * time.Millisecond})
	r.Limiter.Seed([]ratelimit.Sent{{At: time.Now()}})
	eng := e.start([]config.Route{fastRoute("ops", "down")}, []dispatch.Receiver{r}, nil)
	e.publishCleanup(1, events.SeverityInfo)
	testkit.Eventually(t, 20*time.Second, "the card given up", func() bool { return len(e.outcomesOf("down", dispatch.OutcomeFailed)) == 1 })
	if got := attempts.Load(); got < 2 {
		t.Errorf("%d attempts; want at least 2 (giveUpAfter must count from the first attempt, not the dequeue)", got)
	}
	_ = eng
}

// waitSettledWithin is waitSettled with a longer deadline.
func (e *env) waitSettledWithin(d time.Duration, what string) {
	e.t.Helper()
	testkit.Eventually(e.t, d, what, func() bool {
		ci := e.info()
		si, err := e.js.Stream(context.Background(), subject.OpsStream)
		if err != nil {
			e.t.Fatal(err)
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == si.CachedInfo().State.LastSeq
	})
}

package dispatch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/service"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
	"github.com/opswire/opswire/shared/testport"
)

// TestHeldMessageRedeliveredAfterNATSRestartSentOnce: a notifier (one
// replica, controller.LeaderElect false, or any replica whose lease outlives
// the outage) holds a card in its retry loop (receiver answering 503) when
// the nats-server restarts and stays away for longer than ackWait. The
// server then redelivers the messages the notifier still holds, to the same
// live dispatcher, which must take each redelivery as the current delivery
// of the message it holds (metric result "redelivered"), not as a second
// pending in a second card: every event reaches the receiver once.
func TestHeldMessageRedeliveredAfterNATSRestartSentOnce(t *testing.T) {
	dir := t.TempDir()
	port := testport.Must(t) // the restarted server comes back on it
	s1 := natstest.StartWithOptions(t, &server.Options{StoreDir: dir, Port: port})
	nc, err := nats.Connect(s1.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := notifierConfig()
	n.AckWait = config.D(time.Second)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.EnsureDeadLetterStream(ctx, js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, subject.OpsStream, service.ConsumerConfig(cluster, "test", n))
	if err != nil {
		t.Fatal(err)
	}
	records, err := dispatch.NewAsyncRecorder(nc, 64, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, js: js, kv: kv, records: records, cons: cons, settings: dispatch.Settings{Cluster: cluster,
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond, GiveUpAfter: time.Minute,
		AckWait: n.AckWait.Duration, MaxDeliver: n.MaxDeliver, Lookups: 8, LookupBatch: 4}}

	// Every delivery the dispatcher took, and the redeliveries among them.
	var deliveries, redeliveries atomic.Int64
	counting := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
		d.Handle(ctx, m)
		if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
			redeliveries.Add(1)
		}
		deliveries.Add(1)
	}
	h := newHook(t).gated(true) // 503 until opened
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, counting)
	var ps []published
	for i := 0; i < 3; i++ {
		ps = append(ps, e.publishCleanup(i, events.SeverityInfo))
	}
	testkit.Eventually(t, 10*time.Second, "the three messages held in one card's retry loop", func() bool {
		return value(eng.metrics.Pending) == 3 && len(h.arrived) > 0
	})
	if ci := e.info(); ci.NumRedelivered != 0 {
		t.Fatalf("%d redelivered before the restart; progress acks should have kept them", ci.NumRedelivered)
	}

	// The NATS server restarts and is away for 2 s (2 x ackWait). The
	// outage is the scenario, not a wait for something to happen: longer
	// than ackWait, so the server redelivers what the notifier holds.
	s1.Shutdown()
	s1.WaitForShutdown()
	time.Sleep(2 * n.AckWait.Duration)
	natstest.StartWithOptions(t, &server.Options{StoreDir: dir, Port: port})
	testkit.Eventually(t, 10*time.Second, "reconnected", nc.IsConnected)
	testkit.Eventually(t, 15*time.Second, "the held messages redelivered", func() bool { return redeliveries.Load() >= 3 })
	if v := value(eng.metrics.Pending); v != 3 {
		t.Errorf("%v messages pending after the redeliveries, want 3 (each held once)", v)
	}
	h.open() // the receiver recovers
	e.waitSettled("every message acked")
	// Every delivery taken has been counted and every pending settled: a
	// second card, if any, has reached the hook.
	testkit.Eventually(t, 10*time.Second, "every delivery accounted for and settled", func() bool {
		var results float64
		for _, r := range []string{"routed", "redelivered", "duplicate", "unrouted"} {
			results += value(eng.metrics.Messages.WithLabelValues("", r))
		}
		return value(eng.metrics.Pending) == 0 && results == float64(deliveries.Load())
	})
	reqs, ids := h.got()
	t.Logf("%d requests; ids %v; %d deliveries, %d redeliveries", reqs, ids, deliveries.Load(), redeliveries.Load())
	for _, p := range ps {
		if ids[p.id] != 1 {
			t.Errorf("event %s reached the receiver %d times, want 1", p.id, ids[p.id])
		}
	}
	if v := value(eng.metrics.Messages.WithLabelValues("", "redelivered")); v < 3 {
		t.Errorf("messages_total{result=redelivered} = %v, want at least 3", v)
	}
}

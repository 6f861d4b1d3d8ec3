package dispatch_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/testkit"
)

// slowRecords is the real record store with every read taking 20 ms, the
// first one held until release; it counts the keys each read asked for.
type slowRecords struct {
	*dispatch.KVDelivered
	release chan struct{}
	mu      sync.Mutex
	reads   []int
}

func (s *slowRecords) wait(keys int) {
	s.mu.Lock()
	first := len(s.reads) == 0
	s.reads = append(s.reads, keys)
	s.mu.Unlock()
	if first {
		<-s.release
	}
	time.Sleep(20 * time.Millisecond)
}

func (s *slowRecords) State(ctx context.Context, key string) (dispatch.Record, error) {
	s.wait(1)
	return s.KVDelivered.State(ctx, key)
}

func (s *slowRecords) States(ctx context.Context, keys []string) ([]dispatch.Record, error) {
	s.wait(len(keys))
	return s.KVDelivered.States(ctx, keys)
}

func (s *slowRecords) keysRead() (keys, reads, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.reads {
		keys += n
		most = max(most, n)
	}
	return keys, len(s.reads), most
}

// TestLookupsBatchedInArrivalOrder: a burst's delivered records are read in
// batches of at most LookupBatch messages, with Lookups/LookupBatch reads
// under way, and the messages join their group in the order they arrived: a
// slow read of the first message holds back the others already looked up
// (nothing is admitted, no group wait starts), and once it is answered
// every message goes out in one card, the one already delivered skipped.
func TestLookupsBatchedInArrivalOrder(t *testing.T) {
	e := newEnv(t, notifierConfig()) // Lookups 8, LookupBatch 4: two reads at a time
	slow := &slowRecords{KVDelivered: e.delivered(), release: make(chan struct{})}
	e.store = slow
	const burst = 30
	var ps []published
	for i := range burst {
		ps = append(ps, e.publishCleanup(i, events.SeverityWarning))
	}
	done := ps[burst-1] // delivered before: its record is read in a batch and it is skipped
	if err := e.delivered().Mark(context.Background(), []string{dispatch.DeliveredKey(cluster, "ops", "hook", done.id)}, dispatch.RecordDelivered); err != nil {
		t.Fatal(err)
	}
	h := newHook(t)
	route := config.Route{Name: "ops", Receivers: []string{"hook"}, GroupWait: config.D(100 * time.Millisecond), GroupInterval: config.D(time.Second)}
	eng := e.start([]config.Route{route}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, nil)

	testkit.Eventually(t, 10*time.Second, "every message but the first looked up while the first's read is held", func() bool {
		keys, _, _ := slow.keysRead()
		return keys == burst
	})
	if v := value(eng.metrics.Pending); v != 0 {
		t.Fatalf("%v messages joined their group before the first one did", v)
	}
	if n, _ := h.got(); n != 0 {
		t.Fatalf("%d cards sent before the first message was looked up", n)
	}
	close(slow.release)
	e.waitSettled("every message acked")
	n, ids := h.got()
	if n != 1 || len(ids) != burst-1 || ids[done.id] != 0 {
		t.Errorf("%d requests with %d events (the delivered one %d times); want one card of %d", n, len(ids), ids[done.id], burst-1)
	}
	if d := e.outcomesOf("hook", dispatch.OutcomeDropped); len(d) != 1 || d[0].IDs[0] != done.id || d[0].Reason != "already_delivered" {
		t.Errorf("dropped outcomes %+v, want %s already_delivered", d, done.id)
	}
	keys, reads, most := slow.keysRead()
	if most > 4 || reads >= burst || keys != burst {
		t.Errorf("%d reads for %d keys (at most %d in one); want reads of up to 4 messages, fewer reads than messages", reads, keys, most)
	}
}

// countedMsg is one delivery of a message, counting the acks and progress
// acks sent through it.
type countedMsg struct {
	jetstream.Msg
	acks, progress atomic.Int64
}

func (m *countedMsg) Ack() error        { m.acks.Add(1); return m.Msg.Ack() }
func (m *countedMsg) InProgress() error { m.progress.Add(1); return m.Msg.InProgress() }

// TestRedeliveryDuringLookupTakesOverTheHeldMessage: a message whose
// delivered-record lookup stalls is held like one in its group: it gets
// progress acks, and a redelivery of it (same stream sequence) arriving
// meanwhile is no second message but its current delivery, the one the
// progress acks and the final ack go to.
func TestRedeliveryDuringLookupTakesOverTheHeldMessage(t *testing.T) {
	e := newEnv(t, notifierConfig())
	e.settings.AckWait = time.Second // progress acks every 333 ms (the consumer's own ack wait stays 5 s)
	slow := &slowRecords{KVDelivered: e.delivered(), release: make(chan struct{})}
	e.store = slow
	first, again := &countedMsg{}, &countedMsg{}
	twice := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
		first.Msg, again.Msg = m, m
		d.Handle(ctx, first)
		d.Handle(ctx, again) // as the server redelivers it after an outage
	}
	h := newHook(t)
	eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, twice)
	p := e.publishCleanup(1, events.SeverityInfo)
	testkit.Eventually(t, 10*time.Second, "progress acks to the redelivery while the lookup stalls", func() bool {
		return again.progress.Load() > 0
	})
	if keys, reads, _ := slow.keysRead(); keys != 1 || reads != 1 {
		t.Errorf("%d keys in %d reads, want the one message looked up once", keys, reads)
	}
	close(slow.release)
	e.waitSettled("the message acked")
	if a, b := first.acks.Load(), again.acks.Load(); a != 0 || b != 1 {
		t.Errorf("acks %d to the first delivery and %d to the redelivery, want 0 and 1", a, b)
	}
	if _, ids := h.got(); ids[p.id] != 1 {
		t.Errorf("event %s reached the receiver %d times, want 1", p.id, ids[p.id])
	}
	if v := value(eng.metrics.Messages.WithLabelValues("", "redelivered")); v != 1 {
		t.Errorf("messages_total{result=redelivered} = %v, want 1", v)
	}
}

package dispatch_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/testkit"
)

// unreadableRecords is the real record store whose reads fail while down
// (a degraded bucket: no leader, a lost quorum), as KVDelivered's do: an
// error, and RecordNone for what it could not read.
type unreadableRecords struct {
	*dispatch.KVDelivered
	down  atomic.Bool
	reads atomic.Int32 // failed reads
}

var errBucketDown = errors.New("kv bucket unavailable")

func (s *unreadableRecords) State(ctx context.Context, key string) (dispatch.Record, error) {
	if s.down.Load() {
		s.reads.Add(1)
		return dispatch.RecordNone, errBucketDown
	}
	return s.KVDelivered.State(ctx, key)
}

func (s *unreadableRecords) States(ctx context.Context, keys []string) ([]dispatch.Record, error) {
	if s.down.Load() {
		s.reads.Add(1)
		return make([]dispatch.Record, len(keys)), errBucketDown
	}
	return s.KVDelivered.States(ctx, keys)
}

// TestRedeliveryHeldWhileRecordsUnreadable: a redelivered message may have
// been delivered already (its card sent, its ack lost in a crash), and only
// its records can tell. While they cannot be read it is neither sent nor
// given up on: it is nak'ed with a delay and comes back, and once the
// records answer it is skipped as delivered. The receiver never gets it
// twice, and it is never dead-lettered or reported failed.
func TestRedeliveryHeldWhileRecordsUnreadable(t *testing.T) {
	tests := []struct {
		name     string
		settings func(s *dispatch.Settings)
		// parked: the redelivery reaches maxDeliver, where a message is
		// given up on (dead-lettered, reported failed) unless its records
		// say it was delivered: it waits for them too.
		parked bool
	}{
		{"synchronous lookups", func(s *dispatch.Settings) { s.Lookups, s.LookupBatch = 0, 0 }, false},
		{"pipelined lookups", func(s *dispatch.Settings) { s.Lookups, s.LookupBatch = 8, 4 }, false},
		{"at maxDeliver", func(s *dispatch.Settings) { s.MaxDeliver = 2 }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := notifierConfig()
			n.AckWait = config.D(time.Second)
			e := newEnv(t, n)
			tc.settings(&e.settings)
			records := &unreadableRecords{KVDelivered: e.delivered()}
			records.down.Store(true)
			e.store = records
			h := newHook(t)
			p := e.publishCleanup(1, events.SeverityWarning)
			// The first delivery was sent and recorded by a replica that died
			// before acking: it comes back at once (a nak stands in for AckWait).
			if err := (&dispatch.KVDelivered{KV: e.kv}).Mark(context.Background(), []string{dispatch.DeliveredKey(cluster, "ops", "hook", p.id)}, dispatch.RecordDelivered); err != nil {
				t.Fatal(err)
			}
			crashFirst := func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) {
				if md, _ := m.Metadata(); md.NumDelivered == 1 {
					_ = m.Nak()
					return
				}
				d.Handle(ctx, m)
			}
			eng := e.start([]config.Route{fastRoute("ops", "hook")}, []dispatch.Receiver{webhookReceiver(t, "hook", h.URL)}, crashFirst)

			testkit.Eventually(t, 5*time.Second, "the redelivery held, sent or given up on", func() bool {
				n, _ := h.got()
				return n > 0 || value(eng.metrics.Messages.WithLabelValues("", "records_unavailable")) >= 1 ||
					len(e.outcomesOf("hook", dispatch.OutcomeFailed)) > 0
			})
			if n, _ := h.got(); n != 0 {
				t.Fatalf("the receiver got %d requests for a message whose records could not be read", n)
			}
			if failed := e.outcomesOf("hook", dispatch.OutcomeFailed); len(failed) != 0 {
				t.Fatalf("a message whose records could not be read was given up on: %+v", failed)
			}
			records.down.Store(false)
			ci := e.waitSettled("the held message skipped once its records answer")
			if ci.Delivered.Consumer < 3 {
				t.Errorf("%d deliveries, want at least 3 (the crashed one, the held one, the skipped one)", ci.Delivered.Consumer)
			}
			if n, _ := h.got(); n != 0 {
				t.Errorf("the receiver got %d requests for an event it already had", n)
			}
			if dl := e.deadLetters(); len(dl) != 0 {
				t.Errorf("%d dead letters for an event its receiver had", len(dl))
			}
			if failed := e.outcomesOf("hook", dispatch.OutcomeFailed); len(failed) != 0 {
				t.Errorf("failed outcomes %+v for an event its receiver had", failed)
			}
			if v := value(eng.metrics.Messages.WithLabelValues("", "duplicate")); !tc.parked && v != 1 {
				t.Errorf("duplicate count %v, want 1", v)
			}
		})
	}
}

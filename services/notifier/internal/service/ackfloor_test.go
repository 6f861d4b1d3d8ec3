package service

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/natstest"
)

// opsTerms is a small OPS stream (it keeps the last 10 messages), one
// receiver's consumer on it and the delivered-id bucket, for terms of the
// active replica that end in a SIGKILL: their trackers are dropped unsaved.
type opsTerms struct {
	t    *testing.T
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	cons jetstream.Consumer
	m    *backlogMetrics
}

const termsStream, termsCluster, termsReceiver = "OPS", "c", "r"

func newOpsTerms(t *testing.T) *opsTerms {
	t.Helper()
	_, js := natstest.Connect(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: termsStream, Subjects: []string{"ops.>"}, MaxMsgs: 10, Discard: jetstream.DiscardOld}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, termsStream, jetstream.ConsumerConfig{Durable: ConsumerName(termsCluster, termsReceiver),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &opsTerms{t: t, js: js, kv: kv, cons: cons, m: newBacklogMetrics(prometheus.NewRegistry())}
}

func (o *opsTerms) publish(n int) {
	o.t.Helper()
	for i := 0; i < n; i++ {
		if _, err := o.js.Publish(context.Background(), "ops.c.cleanup.deleted", nil); err != nil {
			o.t.Fatal(err)
		}
	}
}

// term starts a term as run does: the tracker loaded and saved at once.
func (o *opsTerms) term() tracked {
	o.t.Helper()
	ctx := context.Background()
	ci, err := o.cons.Info(ctx)
	if err != nil {
		o.t.Fatal(err)
	}
	si, err := streamInfo(ctx, o.js, termsStream)
	if err != nil {
		o.t.Fatal(err)
	}
	tr := loadTracker(ctx, o.kv, termsReceiver, ci, si.State.FirstSeq, zerolog.Nop())
	if err := tr.save(ctx, o.kv, ci); err != nil {
		o.t.Fatal(err)
	}
	return tracked{tr: tr, info: ci}
}

// take delivers n messages to the term, acking those ack says (confirmed
// by the server) and settling them in its tracker, as the dispatcher does.
func (o *opsTerms) take(term tracked, n int, ack func(seq uint64) bool) {
	o.t.Helper()
	batch, err := o.cons.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		o.t.Fatal(err)
	}
	got := 0
	for m := range batch.Messages() {
		got++
		md, err := m.Metadata()
		if err != nil {
			o.t.Fatal(err)
		}
		seq := md.Sequence.Stream
		term.tr.observe(seq)
		if ack(seq) {
			if err := m.DoubleAck(context.Background()); err != nil {
				o.t.Fatal(err)
			}
			term.tr.settle(seq)
		}
	}
	if got != n {
		o.t.Fatalf("fetched %d messages, want %d (%v)", got, n, batch.Error())
	}
}

// lost runs one backlog check of the term and returns the lost counter.
func (o *opsTerms) lost(term tracked) float64 {
	checkBacklog(context.Background(), o.js, o.kv, termsStream, termsCluster, map[string]tracked{termsReceiver: term},
		map[string]bool{}, o.m, zerolog.Nop())
	return testutil.ToFloat64(o.m.lost.WithLabelValues(termsReceiver))
}

func all(uint64) bool { return true }

// TestAckedBeforeSIGKILLNotCountedLost: the accounted sequences are saved at
// the start of a term, every backlog interval and at a clean end, so a term
// killed between two saves leaves out what it acked since the last one.
// Those messages are below the consumer's ack floor, and still in OPS when
// the next term starts: they are accounted for, and not counted lost (a
// false critical alert) when OPS drops them later. Messages OPS dropped
// before the consumer got them are still counted, though the server moves
// the ack floor past them too.
func TestAckedBeforeSIGKILLNotCountedLost(t *testing.T) {
	tests := []struct {
		name string
		run  func(o *opsTerms) float64 // returns the lost counter at the end
		want float64
	}{
		{"acked, then dropped in the next term", func(o *opsTerms) float64 {
			killed := o.term()
			o.publish(5)
			o.take(killed, 5, all)
			next := o.term()
			o.publish(10) // OPS keeps 10: 1-5 go
			return o.lost(next)
		}, 0},
		{"acked out of order, the first one redelivered to the next term", func(o *opsTerms) float64 {
			killed := o.term()
			o.publish(5)
			o.take(killed, 5, func(seq uint64) bool { return seq != 1 })
			next := o.term()
			o.take(next, 1, all) // 1 again, after the consumer's 1 s ack wait
			lost := o.lost(next)
			o.publish(10)
			return lost + o.lost(next)
		}, 0},
		{"dropped before delivery, the ack floor moved past them", func(o *opsTerms) float64 {
			killed := o.term()
			o.publish(15) // 1-5 dropped before anything read them
			o.take(killed, 10, all)
			return o.lost(o.term())
		}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.run(newOpsTerms(t)); got != tc.want {
				t.Errorf("ops_lost_undelivered_total = %v, want %v", got, tc.want)
			}
		})
	}
}

package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natstest"
)

// TestConsumeRecoversLostRefill puts a receiver's Consume in the state of
// the burst benchmark's 30 s stall: the client counts a refill as pending
// that the server does not hold (here the server refuses it, MaxWaiting 1;
// in the stall nats.go never sent it), so the server has messages for the
// consumer and no pull request, and sends nothing, not even heartbeats.
// With nats.go's default expiry that lasts 30 s; the receiver's options must
// pull again within 2*consumeHeartbeat.
func TestConsumeRecoversLostRefill(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync("s.x", []byte("x"), jetstream.WithStallWait(10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(20 * time.Second):
		t.Fatal("burst not stored")
	}
	c, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 300, MaxWaiting: 1})
	if err != nil {
		t.Fatal(err)
	}
	var got, stalls atomic.Int64
	var mu sync.Mutex
	var held []jetstream.Msg
	start := time.Now()
	// Acked a little later: the server stops at MaxAckPending (300) with the
	// first request (500) still waiting, so the refill the client sends at
	// message 251 is refused (MaxWaiting 1); the acks then let the server
	// finish the first request, and the client counts 251 messages of the
	// refused refill as still coming, above its refill threshold (250).
	cc, err := c.Consume(func(m jetstream.Msg) { got.Add(1); mu.Lock(); held = append(held, m); mu.Unlock() },
		consumeOpts(config.Notifier{MaxAckPending: 20000}, func(err error) {
			if errors.Is(err, jetstream.ErrNoHeartbeat) {
				stalls.Add(1)
			}
		})...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	// Two heartbeats, plus room for a loaded machine; far below the 30 s
	// of nats.go's default expiry.
	deadline := start.Add(2*consumeHeartbeat + 8*time.Second)
	// No ack before the server stopped at MaxAckPending: the refill (sent
	// at message 251) must reach it while the first request still waits.
	for got.Load() < 300 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for got.Load() < n && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		for _, m := range held {
			_ = m.Ack()
		}
		held = nil
		mu.Unlock()
	}
	if got.Load() < n {
		info, _ := c.Info(ctx)
		t.Fatalf("%d of %d messages after %v (num_waiting %d, num_pending %d, ack pending %d)", got.Load(), n, time.Since(start),
			info.NumWaiting, info.NumPending, info.NumAckPending)
	}
	if stalls.Load() == 0 {
		t.Fatal("the lost refill was not reproduced: no missed heartbeats")
	}
	t.Logf("%d messages in %v after %d stall(s)", n, time.Since(start), stalls.Load())
}

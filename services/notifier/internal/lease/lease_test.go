package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/testkit"
)

// TestOneActiveAndHandover: of two replicas only one leads; a clean stop
// hands over at once (the key is deleted after lead returned), a holder
// that vanishes hands over after the lease duration.
func TestOneActiveAndHandover(t *testing.T) {
	_, js := natstest.Connect(t)
	kv, err := EnsureBucket(context.Background(), js, 2*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	var leading atomic.Int32
	var overlap atomic.Bool
	var mu sync.Mutex
	leaders := []string{}
	mk := func(id string) *Lease {
		return &Lease{KV: kv, Key: "prod", ID: id, Duration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond,
			RetryPeriod: 200 * time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	}
	lead := func(id string, finishing time.Duration) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			if leading.Add(1) > 1 {
				overlap.Store(true)
			}
			mu.Lock()
			leaders = append(leaders, id)
			mu.Unlock()
			<-ctx.Done()
			time.Sleep(finishing) // the request in flight
			leading.Add(-1)
			return nil
		}
	}
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan struct{})
	go func() { defer close(doneA); _ = mk("a").Run(ctxA, lead("a", 300*time.Millisecond)) }()
	testkit.Eventually(t, 5*time.Second, "a leads", func() bool { return leading.Load() == 1 })
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneB := make(chan struct{})
	go func() { defer close(doneB); _ = mk("b").Run(ctxB, lead("b", 0)) }()
	time.Sleep(time.Second)
	mu.Lock()
	if len(leaders) != 1 {
		t.Fatalf("leaders %v, want only a", leaders)
	}
	mu.Unlock()
	stopped := time.Now()
	stopA()
	<-doneA
	testkit.Eventually(t, 2*time.Second, "b leads after a's clean stop", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(leaders) == 2 && leaders[1] == "b"
	})
	if d := time.Since(stopped); d > 1500*time.Millisecond {
		t.Errorf("handover took %v after a clean stop", d)
	}
	if overlap.Load() {
		t.Fatal("two replicas led at once")
	}

	// b vanishes without releasing (a crash): simulate by a lease whose
	// key is held by nobody renewing. c takes over after the duration.
	if _, err := kv.Put(context.Background(), "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	stopB()
	<-doneB
	rev, err := kv.Create(context.Background(), "prod", []byte("crashed"))
	if err != nil {
		t.Fatal(err)
	}
	_ = rev
	crashed := time.Now()
	ctxC, stopC := context.WithCancel(context.Background())
	defer stopC()
	go func() { _ = mk("c").Run(ctxC, lead("c", 0)) }()
	testkit.Eventually(t, 5*time.Second, "c leads after the crashed holder's lease expired", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(leaders) == 3 && leaders[2] == "c"
	})
	if d := time.Since(crashed); d < 1500*time.Millisecond {
		t.Errorf("c took over after %v, before the lease could expire", d)
	}
}

// lateAnswers is the lease bucket with one renewal's answer lost: the write
// is stored, but the holder hears a timeout (an answer slower than
// RetryPeriod on a loaded machine).
type lateAnswers struct {
	jetstream.KeyValue
	updates atomic.Int32
}

func (k *lateAnswers) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	rev, err := k.KeyValue.Update(ctx, key, value, last)
	if k.updates.Add(1) == 2 && err == nil {
		return 0, context.DeadlineExceeded
	}
	return rev, err
}

// TestLateRenewalKeepsTheLease: a renewal stored after its timeout makes
// the next one fail with a revision mismatch; the key still holds this
// replica's id, so it renews on that revision and keeps leading, instead of
// stopping and handing a burst over mid-way.
func TestLateRenewalKeepsTheLease(t *testing.T) {
	_, js := natstest.Connect(t)
	kv, err := EnsureBucket(context.Background(), js, 2*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	late := &lateAnswers{KeyValue: kv}
	l := &Lease{KV: late, Key: "prod", ID: "a", Duration: 2 * time.Second, RenewDeadline: 1200 * time.Millisecond,
		RetryPeriod: 100 * time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	lost := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx, func(lctx context.Context) error {
			<-lctx.Done()
			if ctx.Err() == nil {
				close(lost)
			}
			return nil
		})
	}()
	testkit.Eventually(t, 5*time.Second, "renewals after the late one", func() bool { return late.updates.Load() >= 8 })
	select {
	case <-lost:
		t.Fatal("the holder stopped leading after its own late renewal")
	default:
	}
	e, err := kv.Get(context.Background(), "prod")
	if err != nil || string(e.Value()) != "a" {
		t.Fatalf("lease key: %v %v", e, err)
	}
	stop()
	<-done
}

package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/kubernetes/fake"
)

func cfg(id string) Config {
	return Config{Enabled: true, Name: "opswire-test", Namespace: "default", Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOneLeaderAndReleaseOnShutdown(t *testing.T) {
	client := fake.NewClientset()
	a, b := New(client, cfg("a"), zerolog.Nop()), New(client, cfg("b"), zerolog.Nop())
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	work := func(ctx context.Context) error { <-ctx.Done(); return nil }
	go func() { doneA <- a.Run(ctxA, work) }()
	waitFor(t, "a to lead", a.IsLeader)
	go func() { doneB <- b.Run(ctxB, work) }()
	time.Sleep(300 * time.Millisecond) // b retries a few times
	if b.IsLeader() {
		t.Fatal("two leaders")
	}
	start := time.Now()
	stopA()
	if err := <-doneA; err != nil {
		t.Fatalf("a.Run after shutdown = %v, want nil", err)
	}
	if a.IsLeader() {
		t.Fatal("a still leads after shutdown")
	}
	waitFor(t, "b to take over", b.IsLeader)
	// Release on shutdown: b must not wait for the 3 s lease to expire.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("takeover took %v, want well under the lease duration", took)
	}
	stopB()
	<-doneB
}

func TestDisabledRunsWork(t *testing.T) {
	e := New(nil, Config{}, zerolog.Nop())
	want := errors.New("boom")
	if err := e.Run(context.Background(), func(context.Context) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Run = %v, want work's error", err)
	}
}

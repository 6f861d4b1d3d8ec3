package leader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/testkit"
	"github.com/rs/zerolog"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func cfg(id string) Config {
	return Config{Enabled: true, Name: "opswire-test", Namespace: "default", Identity: id,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond}
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
	testkit.Eventually(t, 10*time.Second, "a to lead", a.IsLeader)
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
	testkit.Eventually(t, 10*time.Second, "b to take over", b.IsLeader)
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

// apiOutage makes the fake API server refuse lease requests while down()
// says so (for the given holder only when holder is not empty).
func apiOutage(client *fake.Clientset, down func() bool, holder string) {
	client.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if !down() {
			return false, nil, nil
		}
		if holder != "" {
			obj, ok := action.(k8stesting.UpdateAction)
			if !ok {
				return false, nil, nil
			}
			l, ok := obj.GetObject().(*coordinationv1.Lease)
			if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != holder {
				return false, nil, nil
			}
		}
		return true, nil, errors.New("connection refused")
	})
}

// terms records the terms of several electors' work: when each started and
// returned, and whether two ever ran at once.
type terms struct {
	mu      sync.Mutex
	active  int
	overlap bool
	log     []termLog
}

type termLog struct {
	id         string
	start, end time.Time
	cause      error
}

// work runs until its context ends, then takes linger to return (an actor
// finishing its last call).
func (ts *terms) work(id string, linger time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ts.mu.Lock()
		ts.active++
		ts.overlap = ts.overlap || ts.active > 1
		i := len(ts.log)
		ts.log = append(ts.log, termLog{id: id, start: time.Now()})
		ts.mu.Unlock()
		<-ctx.Done()
		time.Sleep(linger)
		ts.mu.Lock()
		ts.active--
		ts.log[i].end, ts.log[i].cause = time.Now(), context.Cause(ctx)
		ts.mu.Unlock()
		return nil
	}
}

func (ts *terms) get() ([]termLog, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]termLog(nil), ts.log...), ts.overlap
}

func TestLostLeaseStopsWorkAndCampaignsAgain(t *testing.T) {
	client := fake.NewClientset()
	var down atomic.Bool
	apiOutage(client, down.Load, "")
	a := New(client, cfg("a"), zerolog.Nop())
	var ts terms
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ts.work("a", 300*time.Millisecond)) }()
	testkit.Eventually(t, 10*time.Second, "a to lead", a.IsLeader)

	down.Store(true)
	cut := time.Now()
	testkit.Eventually(t, 10*time.Second, "a's work to be stopped", func() bool { l, _ := ts.get(); return !l[0].end.IsZero() })
	first, _ := ts.get()
	// Stopped within renewDeadline (2 s) of the last renewal, plus the 300 ms
	// the work takes to return and slack for a loaded machine.
	if took := first[0].end.Sub(cut); took > 3*time.Second {
		t.Fatalf("work stopped %v after the API went down, want within renewDeadline", took)
	}
	if !errors.Is(first[0].cause, ErrLostLeadership) {
		t.Fatalf("work's context cause = %v, want ErrLostLeadership", first[0].cause)
	}
	time.Sleep(2 * time.Second) // the outage outlasts renewDeadline and leaseDuration
	select {
	case err := <-done:
		t.Fatalf("Run returned %v during the outage; it must campaign again", err)
	default:
	}
	if a.IsLeader() {
		t.Fatal("a claims to lead while it cannot renew")
	}
	down.Store(false)
	testkit.Eventually(t, 10*time.Second, "a to lead again", func() bool { return a.IsLeader() && a.Terms() == 2 })
	l, overlap := ts.get()
	if overlap || !l[1].start.After(l[0].end) {
		t.Fatalf("the second term's work started before the first one's returned: %+v", l)
	}
	if a.Lost() != 1 {
		t.Fatalf("Lost = %d, want 1", a.Lost())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after shutdown = %v, want nil", err)
	}
}

func TestStandbyTakesOverFromCutOffLeader(t *testing.T) {
	client := fake.NewClientset()
	var down atomic.Bool
	apiOutage(client, down.Load, "a") // only a's writes fail
	a, b := New(client, cfg("a"), zerolog.Nop()), New(client, cfg("b"), zerolog.Nop())
	var ts terms
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- a.Run(ctx, ts.work("a", 0)) }()
	testkit.Eventually(t, 10*time.Second, "a to lead", a.IsLeader)
	go func() { doneB <- b.Run(ctx, ts.work("b", 0)) }()
	time.Sleep(300 * time.Millisecond)
	if b.IsLeader() {
		t.Fatal("two leaders")
	}
	down.Store(true)
	testkit.Eventually(t, 10*time.Second, "b to take over", b.IsLeader)
	l, overlap := ts.get()
	if overlap || len(l) != 2 || l[1].id != "b" || !l[1].start.After(l[0].end) {
		t.Fatalf("b's work started before a's returned: %+v", l)
	}
	down.Store(false)
	time.Sleep(time.Second) // a campaigns again and finds b holding the lease
	if a.IsLeader() || !b.IsLeader() {
		t.Fatalf("after a came back: a leads %v, b leads %v; want b only", a.IsLeader(), b.IsLeader())
	}
	stop()
	for _, d := range []chan error{doneA, doneB} {
		if err := <-d; err != nil {
			t.Fatalf("Run after shutdown = %v, want nil", err)
		}
	}
}

func TestShutdownReleasesOnlyAfterWorkReturned(t *testing.T) {
	client := fake.NewClientset()
	a := New(client, cfg("a"), zerolog.Nop())
	var ts terms
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, ts.work("a", 500*time.Millisecond)) }()
	testkit.Eventually(t, 10*time.Second, "a to lead", a.IsLeader)
	stop()
	time.Sleep(200 * time.Millisecond) // the work is still returning
	if h := holder(t, client); h != "a" {
		t.Fatalf("lease holder %q while a's work still runs, want a", h)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if h := holder(t, client); h != "" {
		t.Fatalf("lease holder %q after shutdown, want released", h)
	}
}

func TestWorkErrorEndsRunAndReleases(t *testing.T) {
	client := fake.NewClientset()
	a := New(client, cfg("a"), zerolog.Nop())
	want := errors.New("boom")
	if err := a.Run(context.Background(), func(context.Context) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Run = %v, want work's error", err)
	}
	if h := holder(t, client); h != "" {
		t.Fatalf("lease holder %q after the work failed, want released", h)
	}
}

func holder(t *testing.T, client *fake.Clientset) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases("default").Get(context.Background(), "opswire-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

package testkit

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the failure and stops
// the calling goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	failed atomic.Bool
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed.Store(true)
	runtime.Goexit()
}

// run calls fn with a fatalRecorder on its own goroutine and reports whether
// it failed.
func run(t *testing.T, fn func(tb testing.TB)) bool {
	t.Helper()
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.failed.Load()
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	if run(t, func(tb testing.TB) {
		Eventually(tb, time.Second, "three polls", func() bool { return calls.Add(1) >= 3 })
	}) {
		t.Fatal("Eventually failed on a condition that came true")
	}
	if got := calls.Load(); got != 3 {
		t.Fatalf("condition polled %d times, want 3", got)
	}
}

func TestEventuallyFailsAfterTheTimeout(t *testing.T) {
	start := time.Now()
	if !run(t, func(tb testing.TB) { Eventually(tb, 50*time.Millisecond, "never", func() bool { return false }) }) {
		t.Fatal("Eventually passed a condition that never held")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("failed after %v, before its timeout", d)
	}
}

func TestNeverFailsAsSoonAsTheConditionHolds(t *testing.T) {
	start := time.Now()
	if !run(t, func(tb testing.TB) { Never(tb, 10*time.Second, "at once", func() bool { return true }) }) {
		t.Fatal("Never passed a condition that held")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("failed after %v, not at once", d)
	}
}

func TestNeverPassesAConditionThatStaysFalse(t *testing.T) {
	if run(t, func(tb testing.TB) { Never(tb, 50*time.Millisecond, "nothing", func() bool { return false }) }) {
		t.Fatal("Never failed on a condition that stayed false")
	}
}

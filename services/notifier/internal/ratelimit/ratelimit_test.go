package ratelimit

import (
	"context"
	"testing"
	"time"
)

// fakeClock advances only when the limiter sleeps.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.t = c.t.Add(d)
	return nil
}

func TestWindowsAreNeverExceeded(t *testing.T) {
	tests := []struct {
		name    string
		windows []Window
		events  int
		// checks: at most max admitted events in any span of length period
		checks []Window
		// wantDuration is the time the last event is admitted at
		wantLast time.Duration
	}{
		{"feishu 5/s 100/min", []Window{{5, time.Second}, {100, time.Minute}}, 250,
			[]Window{{5, time.Second}, {100, time.Minute}}, 2*time.Minute + 9*time.Second},
		{"only per second", []Window{{5, time.Second}}, 12, []Window{{5, time.Second}}, 2 * time.Second},
		{"disabled window ignored", []Window{{0, time.Second}, {3, time.Minute}}, 4, []Window{{3, time.Minute}}, time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(0, 0)}
			l := New(0, tc.windows...)
			l.now, l.sleep = clk.now, clk.sleep
			var at []time.Time
			for i := 0; i < tc.events; i++ {
				if err := l.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
				at = append(at, clk.t)
			}
			for _, w := range tc.checks {
				for i := range at {
					n := 0
					for j := i; j < len(at) && at[j].Sub(at[i]) < w.Period; j++ {
						n++
					}
					if n > w.Limit {
						t.Fatalf("%d events within %v starting at event %d, limit %d", n, w.Period, i, w.Limit)
					}
				}
			}
			if last := at[len(at)-1].Sub(time.Unix(0, 0)); last != tc.wantLast {
				t.Fatalf("last event admitted at %v, want %v (the limiter must not be slower than the caps)", last, tc.wantLast)
			}
		})
	}
}

func TestWaitStopsWithContext(t *testing.T) {
	l := New(0, Window{1, time.Hour})
	if err := l.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Wait(ctx); err == nil {
		t.Fatal("Wait on a full window with a cancelled context: want error")
	}
}

func TestRegistrySharesLimitersByKey(t *testing.T) {
	var r Registry
	mk := func() *Limiter { return New(0, Window{1, time.Second}) }
	a, b, c := r.Get("url-a", mk), r.Get("url-a", mk), r.Get("url-b", mk)
	if a != b || a == c {
		t.Fatalf("same key must share one limiter, different keys must not")
	}
}

// TestSeedCarriesTheBudgetOver: a limiter seeded with another replica's
// recent sends waits for them to age out of the windows.
func TestSeedCarriesTheBudgetOver(t *testing.T) {
	now := time.Unix(1000, 0)
	old := New(0, Window{Limit: 5, Period: time.Second}, Window{Limit: 100, Period: time.Minute})
	old.now = func() time.Time { return now }
	for i := 0; i < 5; i++ {
		if d := old.reserve(); d != 0 {
			t.Fatalf("send %d refused", i)
		}
	}
	next := New(0, Window{Limit: 5, Period: time.Second}, Window{Limit: 100, Period: time.Minute})
	next.now = func() time.Time { return now.Add(100 * time.Millisecond) }
	next.Seed(old.Sends())
	if d := next.reserve(); d != 900*time.Millisecond {
		t.Fatalf("seeded limiter waits %v, want 900ms", d)
	}
	if got := len(next.Times()); got != 5 {
		t.Fatalf("Times = %d entries, want 5", got)
	}
}

// TestSeedingItsOwnLogAgainCountsOnce: a process that regains the lease
// loads the last saved log, which holds its own sends (saved by itself, or
// carried over by the replica active meanwhile): they are already in its
// limiter and count once, not twice (twice holds back sends the receiver
// allows, for up to the longest window: an hour for Teams). Each send of
// another replica counts once too, however often it is seeded.
func TestSeedingItsOwnLogAgainCountsOnce(t *testing.T) {
	window := Window{Limit: 5, Period: time.Minute}
	tests := []struct {
		name string
		// regain seeds a, which sent 3, as a process regaining the lease;
		// b is another replica's limiter.
		regain func(a, b *Limiter)
		want   int // sends a counts after
	}{
		{"straight after itself", func(a, _ *Limiter) { a.Seed(a.Sends()) }, 3},
		{"after another replica that sent 1", func(a, b *Limiter) {
			b.Seed(a.Sends())
			send(t, b, 1)
			a.Seed(b.Sends())
		}, 4},
		{"the other replica's log seeded twice", func(a, b *Limiter) {
			b.Seed(a.Sends())
			send(t, b, 1)
			a.Seed(b.Sends())
			a.Seed(b.Sends())
		}, 4},
		{"after itself, having been seeded before", func(a, b *Limiter) {
			send(t, b, 1)
			a.Seed(b.Sends())
			a.Seed(a.Sends())
		}, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			clock := func() time.Time { return now }
			a, b := New(0, window), New(0, window)
			a.now, b.now = clock, clock
			send(t, a, 3)
			tc.regain(a, b)
			if got := len(a.Times()); got != tc.want {
				t.Errorf("%d sends counted, want %d", got, tc.want)
			}
			send(t, a, window.Limit-tc.want)
			if d := a.reserve(); d == 0 {
				t.Errorf("a send over the limit admitted")
			}
		})
	}
}

// send admits n events at once on l's clock.
func send(t *testing.T, l *Limiter, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if d := l.reserve(); d != 0 {
			t.Fatalf("send %d of %d refused (wait %v)", i+1, n, d)
		}
	}
}

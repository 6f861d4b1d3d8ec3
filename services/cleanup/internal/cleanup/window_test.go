package cleanup

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	type step struct {
		at      time.Duration // offset from t0
		release bool          // release the slot taken at `at` instead of reserving
		wait    time.Duration // expected Reserve result
	}
	tests := []struct {
		name  string
		max   int
		per   time.Duration
		steps []step
	}{
		{"under the cap", 3, time.Minute, []step{{at: 0}, {at: time.Second}, {at: 2 * time.Second}}},
		{"over the cap waits for the oldest to leave", 2, time.Minute, []step{
			{at: 0}, {at: 10 * time.Second}, {at: 20 * time.Second, wait: 40 * time.Second},
			{at: 59 * time.Second, wait: time.Second},
			{at: time.Minute}, // the first slot left exactly now
			{at: time.Minute, wait: 10 * time.Second},
		}},
		{"release frees a slot", 1, time.Minute, []step{
			{at: 0}, {at: time.Second, wait: 59 * time.Second}, {at: 0, release: true}, {at: 2 * time.Second},
		}},
		{"releasing an unknown time changes nothing", 1, time.Minute, []step{
			{at: 0}, {at: 5 * time.Second, release: true}, {at: 6 * time.Second, wait: 54 * time.Second},
		}},
		{"short test window", 20, time.Second, []step{
			{at: 0}, {at: 999 * time.Millisecond}, {at: 2 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWindow(tc.max, tc.per)
			for i, s := range tc.steps {
				if s.release {
					w.Release(t0.Add(s.at))
					continue
				}
				if got := w.Reserve(t0.Add(s.at)); got != s.wait {
					t.Fatalf("step %d: Reserve(+%v) = %v, want %v", i, s.at, got, s.wait)
				}
			}
		})
	}
}

// TestWindowNeverExceedsMax drives 100 reservations at 10 ms steps through a
// 20-per-second window and checks every sliding second holds at most 20.
func TestWindowNeverExceedsMax(t *testing.T) {
	w := NewWindow(20, time.Second)
	var granted []time.Time
	now := t0
	for len(granted) < 100 {
		if wait := w.Reserve(now); wait == 0 {
			granted = append(granted, now)
		}
		now = now.Add(10 * time.Millisecond)
	}
	for i := range granted {
		n := 0
		for _, g := range granted[i:] {
			if g.Sub(granted[i]) < time.Second {
				n++
			}
		}
		if n > 20 {
			t.Fatalf("%d deletions within 1s starting at %v", n, granted[i].Sub(t0))
		}
	}
	if got := granted[99].Sub(t0); got < 4*time.Second || got >= 5*time.Second {
		t.Fatalf("100th deletion at +%v, want in [4s,5s)", got)
	}
}

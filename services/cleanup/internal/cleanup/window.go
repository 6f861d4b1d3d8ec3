package cleanup

import (
	"sync"
	"time"
)

// Window caps deletions at Max in any sliding window of length Per.
//
// A token bucket (x/time/rate) does not fit the contract "at most N per
// minute": with burst N it lets N through at once and refills during the same
// minute, so up to 2N can pass in the first minute. The window keeps the times
// of the last Max deletions instead: exact, and O(Max) memory.
type Window struct {
	Max int
	Per time.Duration

	mu    sync.Mutex
	times []time.Time // oldest first; len <= Max
}

// NewWindow builds a limiter of max deletions per window.
func NewWindow(max int, per time.Duration) *Window {
	return &Window{Max: max, Per: per, times: make([]time.Time, 0, max)}
}

// Reserve takes a slot at now. It returns 0 when a slot was taken, or how
// long to wait until one frees up (nothing is taken then).
func (w *Window) Reserve(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	cut := 0
	for cut < len(w.times) && !w.times[cut].After(now.Add(-w.Per)) {
		cut++
	}
	w.times = append(w.times[:0], w.times[cut:]...)
	if len(w.times) >= w.Max {
		return w.times[0].Add(w.Per).Sub(now)
	}
	w.times = append(w.times, now)
	return 0
}

// Release gives back a slot taken at t when no deletion happened (the pod was
// already gone, no longer qualified, or the delete failed).
func (w *Window) Release(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.times) - 1; i >= 0; i-- {
		if w.times[i].Equal(t) {
			w.times = append(w.times[:i], w.times[i+1:]...)
			return
		}
	}
}

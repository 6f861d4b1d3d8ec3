// Package ratelimit enforces hard caps of the form "at most N requests in
// any window of length P", such as Feishu's 5 per second and 100 per minute
// per bot.
//
// A token bucket (golang.org/x/time/rate) cannot express such a cap: a bucket
// of rate 100/min with any burst b lets b+100 requests through in some
// 60-second window, and with burst 1 it forbids the 5-message bursts Feishu
// allows. A sliding log of the last N send times is exact and tiny (N ≤ a few
// hundred), so this package keeps one per window. A margin is added to each
// window because the receiver measures arrival times, which jitter.
package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"time"
)

// Window is one cap: at most Limit events in any Period.
type Window struct {
	Limit  int
	Period time.Duration
}

// Sent is one admitted event: when, and which limiter admitted it (By), so
// that a limiter seeded with a saved log counts its own events once.
type Sent struct {
	At time.Time
	By string
}

// Limiter admits events under every one of its windows at once.
type Limiter struct {
	mu      sync.Mutex
	id      string
	windows []Window
	margin  time.Duration
	logs    [][]Sent // per window, admitted events, oldest first
	now     func() time.Time
	sleep   func(context.Context, time.Duration) error
}

// New returns a limiter over the windows (those with Limit ≤ 0 are ignored),
// each widened by margin.
func New(margin time.Duration, windows ...Window) *Limiter {
	var id [8]byte
	_, _ = rand.Read(id[:])
	l := &Limiter{id: hex.EncodeToString(id[:]), margin: margin, now: time.Now, sleep: sleepCtx}
	for _, w := range windows {
		if w.Limit > 0 && w.Period > 0 {
			l.windows = append(l.windows, w)
			l.logs = append(l.logs, nil)
		}
	}
	return l
}

// Wait blocks until an event is admitted under every window, or ctx ends.
func (l *Limiter) Wait(ctx context.Context) error {
	for {
		d := l.reserve()
		if d == 0 {
			return nil
		}
		if err := l.sleep(ctx, d); err != nil {
			return err
		}
	}
}

// reserve admits an event now and returns 0, or returns how long to wait.
func (l *Limiter) reserve() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var wait time.Duration
	for i, w := range l.windows {
		period := w.Period + l.margin
		log := l.logs[i]
		for len(log) > 0 && now.Sub(log[0].At) >= period {
			log = log[1:]
		}
		l.logs[i] = log
		if len(log) >= w.Limit {
			if d := log[len(log)-w.Limit].At.Add(period).Sub(now); d > wait {
				wait = d
			}
		}
	}
	if wait > 0 {
		return wait
	}
	for i := range l.windows {
		l.logs[i] = append(l.logs[i], Sent{At: now, By: l.id})
	}
	return 0
}

// Times returns the admitted times that still count against some window,
// oldest first (Sends without their origins).
func (l *Limiter) Times() []time.Time {
	sends := l.Sends()
	out := make([]time.Time, len(sends))
	for i, s := range sends {
		out[i] = s.At
	}
	return out
}

// Sends returns the admitted events that still count against some window,
// oldest first: the log of the longest window, which holds every other
// window's entries too. Those this limiter admitted carry its id; those it
// was seeded with, the id of the limiter that admitted them.
func (l *Limiter) Sends() []Sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	longest := -1
	for i, w := range l.windows {
		if longest < 0 || w.Period > l.windows[longest].Period {
			longest = i
		}
	}
	if longest < 0 {
		return nil
	}
	return append([]Sent(nil), l.logs[longest]...)
}

// Seed counts events admitted elsewhere (by the replica that was active
// before this one) in every window, so a failover does not start with a
// fresh budget while the receiver still counts the old requests.
//
// sends is the last saved log, which holds every event its writer counted:
// its own and those it was seeded with. So it replaces what earlier seeds
// brought, and its events admitted by this limiter are left out: the
// limiter counts them already, at their exact times. A process that regains
// the lease, after another replica or straight after itself, counts each
// event once.
func (l *Limiter) Seed(sends []Sent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.windows {
		var merged []Sent
		for _, s := range l.logs[i] {
			if s.By == l.id {
				merged = append(merged, s)
			}
		}
		for _, s := range sends {
			if s.By != l.id {
				merged = append(merged, s)
			}
		}
		sort.SliceStable(merged, func(a, b int) bool { return merged[a].At.Before(merged[b].At) })
		if n := len(merged) - l.windows[i].Limit; n > 0 {
			merged = merged[n:]
		}
		l.logs[i] = merged
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Registry hands out one limiter per key, so receivers that share a bot URL
// share its budget.
type Registry struct {
	mu sync.Mutex
	m  map[string]*Limiter
}

// Get returns the limiter of key, creating it with make on first use.
func (r *Registry) Get(key string, make func() *Limiter) *Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*Limiter{}
	}
	l, ok := r.m[key]
	if !ok {
		l = make()
		r.m[key] = l
	}
	return l
}

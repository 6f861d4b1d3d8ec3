package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
)

// slowRateLog is a rate-log store whose saves take the given times in turn
// (a KV put of a degraded bucket), then none.
type slowRateLog struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (l *slowRateLog) Save(ctx context.Context, _ string, _ []ratelimit.Sent) error {
	l.mu.Lock()
	var d time.Duration
	if len(l.delays) > 0 {
		d, l.delays = l.delays[0], l.delays[1:]
	}
	l.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	return nil
}

// clockedSink records when each send reaches it.
type clockedSink struct {
	mu  sync.Mutex
	now func() time.Time
	at  []time.Time
}

func (s *clockedSink) Send(context.Context, *notify.Notification) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = append(s.at, s.now())
	return false, nil
}

func (s *clockedSink) sends() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at)
}

// TestSlowRateLogSaveDoesNotBreachTheLimit: a send goes out at the slot
// its rate limit gave it, whatever the rate-log store does meanwhile. A
// save that took 400 ms between a slot and its send made that send late,
// and the sends admitted after it (their slots counted from the early slot)
// went out together with it: three within 100 ms at a limit of 2 per 500 ms.
func TestSlowRateLogSaveDoesNotBreachTheLimit(t *testing.T) {
	tests := []struct {
		name   string
		delays []time.Duration
	}{
		{"the first save slow", []time.Duration{400 * time.Millisecond}},
		{"the second save slow", []time.Duration{0, 400 * time.Millisecond}},
	}
	window := ratelimit.Window{Limit: 2, Period: 500 * time.Millisecond}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, notifierConfig())
			e.rateLog = &slowRateLog{delays: tc.delays}
			sink := &clockedSink{now: time.Now}
			// Six routes, each its own card of the one event: six sends in a row.
			var routes []config.Route
			for _, name := range []string{"r1", "r2", "r3", "r4", "r5", "r6"} {
				r := fastRoute(name, "bot")
				r.Continue = true
				routes = append(routes, r)
			}
			// The margin absorbs the scheduling between a slot and its send;
			// the limit is checked without it, as the receiver counts.
			lim := ratelimit.New(50*time.Millisecond, window)
			e.start(routes, []dispatch.Receiver{{Name: "bot", Sink: sink, Limiter: lim, Budget: "bot", Timeout: 5 * time.Second}}, nil)
			e.publishCleanup(1, events.SeverityInfo)
			e.waitSettled("six cards sent")
			at := sink.sends()
			if len(at) != len(routes) {
				t.Fatalf("%d sends, want %d", len(at), len(routes))
			}
			slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
			for i := range at {
				n := 0
				for j := i; j < len(at) && at[j].Sub(at[i]) < window.Period; j++ {
					n++
				}
				if n > window.Limit {
					t.Fatalf("%d sends within %v from send %d (at +%v), limit %d", n, window.Period, i, at[i].Sub(at[0]), window.Limit)
				}
			}
		})
	}
}

// TestRateLogKeepsAgesAcrossClocks: a successor whose clock is ahead of
// the saver's must not see the saved sends as older than they are (it would
// admit sends the receiver still counts against the old ones). What the
// saver saw as sent 100 ms ago, the loader sees as sent at most 100 ms ago,
// whatever either clock says.
func TestRateLogKeepsAgesAcrossClocks(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx := context.Background()
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	saved := time.Unix(1_700_000_000, 0)
	ages := []time.Duration{900 * time.Millisecond, 100 * time.Millisecond}
	tests := []struct {
		name string
		skew time.Duration // the loader's clock minus the saver's, read at the same moment
	}{
		{"successor 2s ahead", 2 * time.Second},
		{"successor 2s behind", -2 * time.Second},
		{"same clock", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			saver := &dispatch.KVRateLog{KV: kv, Now: func() time.Time { return saved }}
			var sent []ratelimit.Sent
			for i, a := range ages {
				sent = append(sent, ratelimit.Sent{At: saved.Add(-a), By: fmt.Sprint("limiter-", i)})
			}
			if err := saver.Save(ctx, "bot", sent); err != nil {
				t.Fatal(err)
			}
			now := saved.Add(tc.skew)
			loader := &dispatch.KVRateLog{KV: kv, Now: func() time.Time { return now }}
			got, err := loader.Load(ctx, "bot")
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ages) {
				t.Fatalf("loaded %d sends, want %d", len(got), len(ages))
			}
			for i, s := range got {
				if age := now.Sub(s.At); age != ages[i] {
					t.Errorf("send %d: %v old by the loader's clock, the saver saw it %v old", i, age, ages[i])
				}
				if s.By != sent[i].By {
					t.Errorf("send %d admitted by %q, loaded as by %q", i, sent[i].By, s.By)
				}
			}
		})
	}
}

package actor

import (
	"sync"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/testkit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// steppedClock is a wall clock and a monotonic clock that the test moves
// apart: run moves both (the machine runs), jump moves the wall clock alone
// (the machine was suspended, or NTP stepped the clock forward), as Go
// timers, which follow the monotonic clock, see it.
type steppedClock struct {
	mu     sync.Mutex
	wall   time.Time
	mono   time.Duration
	timers []steppedTimer
}

type steppedTimer struct {
	at time.Duration // on the monotonic clock
	c  chan time.Time
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *steppedClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.timers = append(c.timers, steppedTimer{at: c.mono + d, c: ch})
	return ch
}

// run lets d pass on both clocks and fires the timers due.
func (c *steppedClock) run(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall, c.mono = c.wall.Add(d), c.mono+d
	pending := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at <= c.mono {
			tm.c <- c.wall
			continue
		}
		pending = append(pending, tm)
	}
	c.timers = pending
}

// jump moves the wall clock alone.
func (c *steppedClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// waiting is how many timers have not fired.
func (c *steppedClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// TestWeeklyTickAfterTheWallClockJumps: the seed's weekly schedule, and the
// wall clock passes Monday 10:00 while the monotonic clock does not (a
// suspended machine, an NTP step forward). The report must still go out
// within a minute of the machine running on, inside the tick's catch-up
// window: a single timer armed for the whole wait fires on the monotonic
// clock, hours late, and the tick is then counted missed.
func TestWeeklyTickAfterTheWallClockJumps(t *testing.T) {
	tests := []struct {
		name string
		// start is the wall clock at the leader's start, before the tick;
		// before runs until the jump; after the jump the wall clock is at
		// tick+after, and then runs for one minute.
		start, before, after time.Duration
	}{
		{name: "suspended from Saturday night to Monday 10:05", start: -36 * time.Hour, before: 12 * time.Hour, after: 5 * time.Minute},
		{name: "a clock 15 minutes slow stepped forward by NTP at 10:05", start: -time.Hour, before: 50 * time.Minute, after: 5 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.pod("shop", "crashy", 150)
			ops := e.collect("ops.*.report.restarts")
			cfg := testConfig(t, "sendReport:\n  schedule: \"00 00 10 * * 1\"\nimageAlert:\n  enable: false\n")
			probe, err := New(Deps{Config: cfg, Cluster: cluster, Getenv: func(string) string { return "" }})
			if err != nil {
				t.Fatal(err)
			}
			// A tick in the real future: the report's publish deadline is
			// a real context deadline.
			tick := probe.sched.Next(time.Now())
			clock := &steppedClock{wall: tick.Add(tc.start)}
			a, err := New(Deps{Config: cfg, Cluster: cluster, JS: e.js, NC: e.nc, MaxPayload: e.nc.MaxPayload(),
				Log: zerolog.Nop(), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }, Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			stop := leadUntilServing(t, e, a)
			defer stop()
			testkit.Eventually(t, 10*time.Second, "the scheduler waiting", func() bool { return clock.waiting() > 0 })
			clock.run(tc.before)
			testkit.Eventually(t, 10*time.Second, "the scheduler waiting again", func() bool { return clock.waiting() > 0 })
			clock.jump(tick.Add(tc.after).Sub(clock.Now()))
			clock.run(time.Minute)

			testkit.Eventually(t, 10*time.Second, "the tick's report in OPS", func() bool { return len(ops.reports(t)) == 1 })
			if r := ops.reports(t)[0]; r.ID != ScheduledID(cluster, tick) || r.OnDemand {
				t.Fatalf("report %s (on demand %v), want the tick's %s", r.ID, r.OnDemand, ScheduledID(cluster, tick))
			}
			if n := testutil.ToFloat64(a.m.missed); n != 0 {
				t.Fatalf("ticks_missed_total = %v, want 0", n)
			}
		})
	}
}

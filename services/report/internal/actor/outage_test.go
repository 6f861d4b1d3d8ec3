package actor

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/testkit"
	"github.com/opswire/opswire/shared/testport"
)

// outageClock is the actor's clock in TestReportTickAcrossNATSOutage: held
// just before the tick until released, then running from the tick, so the
// test chooses when the tick fires (once NATS is down).
type outageClock struct {
	mu       sync.Mutex
	tick     time.Time
	released time.Time
}

func (c *outageClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released.IsZero() {
		return c.tick.Add(-100 * time.Millisecond)
	}
	return c.tick.Add(time.Since(c.released))
}

func (c *outageClock) release() {
	c.mu.Lock()
	c.released = time.Now()
	c.mu.Unlock()
}

// A tick that fires while NATS is down must be stored once NATS is back, for
// as long as its retry window (tick+catchUp or the next tick) lasts, not given
// up after a fixed run timeout (the old scheduledRunTimeout of 2 minutes). The
// outage here is longer than one publish attempt (publishAttempt) and than
// any run timeout a build would bound the tick with in a test: a build that
// gives the tick up before NATS returns counts it in ticks_missed_total and
// never reaches reports_total{schedule,sent}.
func TestReportTickAcrossNATSOutage(t *testing.T) {
	const outage = publishAttempt + time.Second
	dir := t.TempDir()
	srv := natstest.StartWithOptions(t, &server.Options{StoreDir: dir, Port: testport.Must(t)}) // restarted on it
	port := srv.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, nc: nc, js: js, cluster: cluster}
	e.pod("shop", "crashy", 150)

	// Hourly: the only tick in the test is the one the clock is held before.
	cfg := testConfig(t, "sendReport:\n  schedule: \"@hourly\"\n  catchUp: 2h\nnats:\n  duplicates: 3h\nimageAlert:\n  enable: false\n")
	probe, err := New(Deps{Config: cfg, Cluster: cluster, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	clock := &outageClock{tick: probe.sched.Next(time.Now())}
	a, err := New(Deps{Config: cfg, Cluster: cluster, JS: js, NC: nc, MaxPayload: nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }, Clock: wallClock(clock.now)})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stopLead := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Lead(lctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			stopLead()
			if err := <-done; err != nil {
				t.Errorf("Lead: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	testkit.Eventually(t, 10*time.Second, "leader ready", func() bool { return a.serving.Load() && a.Ready() == nil })

	srv.Shutdown()
	srv.WaitForShutdown()
	testkit.Eventually(t, 5*time.Second, "the client to see NATS down", func() bool { return !nc.IsConnected() })
	clock.release() // the tick fires now, with NATS down
	sent := func() float64 { return testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "sent")) }
	missed := func() float64 { return testutil.ToFloat64(a.m.missed) }
	// Through the outage: nothing stored, nothing given up.
	for end := time.Now().Add(outage); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n := sent(); n != 0 {
			t.Fatalf("reports_total{schedule,sent} = %v with NATS down", n)
		}
		if n := missed(); n != 0 {
			t.Fatalf("the tick was given up %s into a NATS outage (ticks_missed_total = %v); its retry window is until %s",
				time.Since(clock.released), n, a.sched.Next(clock.tick))
		}
	}

	natstest.StartWithOptions(t, &server.Options{Port: port, StoreDir: dir})
	defer stop() // before the server's cleanup shuts it down
	testkit.Eventually(t, 30*time.Second, "the tick's report stored once NATS is back", func() bool { return sent() >= 1 })
	// Once sent, the tick is recorded; let any second store of it show.
	time.Sleep(500 * time.Millisecond)
	if n := sent(); n != 1 {
		t.Fatalf("reports_total{schedule,sent} = %v, want exactly the one tick", n)
	}
	for _, o := range []string{"failed", "duplicate"} {
		if n := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, o)); n != 0 {
			t.Fatalf("reports_total{schedule,%s} = %v, want 0", o, n)
		}
	}
	if n := missed(); n != 0 {
		t.Fatalf("ticks_missed_total = %v", n)
	}
	if got := testutil.ToFloat64(a.m.lastTick); got != float64(clock.tick.Unix()) {
		t.Fatalf("last tick %v, want %d (%s)", got, clock.tick.Unix(), clock.tick)
	}
	// The stored report is that tick's.
	ops := e.collect("ops.*.report.restarts")
	testkit.Eventually(t, 10*time.Second, "the report in OPS", func() bool { return len(ops.reports(t)) == 1 })
	if r := ops.reports(t)[0]; r.ID != ScheduledID(cluster, clock.tick) || r.OnDemand {
		t.Fatalf("report %s (on demand %v), want %s", r.ID, r.OnDemand, ScheduledID(cluster, clock.tick))
	}
}

// TestTickAfterARetriedTickIsNotLostSilently: a NATS outage longer than the
// schedule's interval. Tick T is retried until its deadline, the next tick
// T2; the schedule then moves on from T, not from the clock, so T2 is tried
// too (and stored: NATS comes back within T2's own retry window) instead of
// being skipped, neither attempted nor counted. Every tick is either stored
// or counted in ticks_missed_total.
func TestTickAfterARetriedTickIsNotLostSilently(t *testing.T) {
	const every = 6 * time.Second
	dir := t.TempDir()
	srv := natstest.StartWithOptions(t, &server.Options{StoreDir: dir, Port: testport.Must(t)}) // restarted on it
	port := srv.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, nc: nc, js: js, cluster: cluster}
	e.pod("shop", "crashy", 150)
	cfg := testConfig(t, "sendReport:\n  schedule: \"@every 6s\"\nimageAlert:\n  enable: false\n")
	a, err := New(Deps{Config: cfg, Cluster: cluster, JS: js, NC: nc, MaxPayload: nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stopLead := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Lead(lctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { stopLead(); <-done }) }
	t.Cleanup(stop)
	testkit.Eventually(t, 10*time.Second, "leader ready", func() bool { return a.serving.Load() && a.Ready() == nil })

	// T: a tick at least 2 s away, the one before it stored (still in
	// flight when NATS goes down, it would be given up at T and counted).
	lastTick := func() float64 { return testutil.ToFloat64(a.m.lastTick) }
	var T time.Time
	// The first tick after the leader serves is one its schedule runs.
	for handled := a.sched.Next(time.Now()); ; handled = T {
		testkit.Eventually(t, time.Until(handled)+10*time.Second, "the tick before T stored", func() bool { return lastTick() >= float64(handled.Unix()) })
		if T = a.sched.Next(handled); time.Until(T) >= 2*time.Second {
			break
		}
	}
	T2, T3 := T.Add(every), T.Add(2*every)
	// NATS goes down before T and stays down until T has been given up at
	// its deadline, T2.
	srv.Shutdown()
	srv.WaitForShutdown()
	missed := func() float64 { return testutil.ToFloat64(a.m.missed) }
	testkit.Eventually(t, time.Until(T2)+10*time.Second, "T given up at its deadline", func() bool { return missed() >= 1 })
	natstest.StartWithOptions(t, &server.Options{Port: port, StoreDir: dir})
	defer stop() // before the server's cleanup shuts it down

	ops := e.collect("ops.*.report.restarts")
	stored := func(tk time.Time) bool {
		for _, r := range ops.reports(t) {
			if r.ID == ScheduledID(cluster, tk) {
				return true
			}
		}
		return false
	}
	testkit.Eventually(t, time.Until(T3)+10*time.Second, "T2's and T3's reports in OPS", func() bool { return stored(T2) && stored(T3) })
	if n := missed(); n != 1 || stored(T) {
		t.Fatalf("ticks T=%s T2=%s T3=%s: stored T=%v, ticks_missed_total=%v; want T missed (counted once), T2 and T3 stored",
			T.Format("15:04:05"), T2.Format("15:04:05"), T3.Format("15:04:05"), stored(T), n)
	}
}

// steppingClock is the actor's clock in
// TestTickBetweenScheduleStartAndCatchUpRunsOnce: its first reading (the
// schedule's start) is just before tick, every later one is past it,
// running on from tick: the tick falls between the schedule's start and
// catch-up.
type steppingClock struct {
	mu    sync.Mutex
	tick  time.Time
	start time.Time
}

func (c *steppingClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.start.IsZero() {
		c.start = time.Now()
		return c.tick.Add(-100 * time.Millisecond)
	}
	return c.tick.Add(time.Since(c.start))
}

// TestTickBetweenScheduleStartAndCatchUpRunsOnce: a new leader's schedule
// starts from the moment before catch-up; a tick that comes due between that
// moment and catch-up's look at the clock must be run by one of them, not by
// both (the second run is a duplicate in OPS, but is counted, and in increase
// mode moves the baseline again).
func TestTickBetweenScheduleStartAndCatchUpRunsOnce(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	cfg := testConfig(t, "sendReport:\n  schedule: \"@every 2s\"\n  catchUp: 1m\nimageAlert:\n  enable: false\n")
	probe, err := New(Deps{Config: cfg, Cluster: cluster, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	tick := probe.sched.Next(time.Now())
	prev, next := tick.Add(-2*time.Second), tick.Add(2*time.Second)
	// The tick before was sent and recorded: catch-up is on, and finds tick
	// if it reads the clock again.
	if err := kvStore(t, e).SetLastTick(e.ctx, prev); err != nil {
		t.Fatal(err)
	}
	clock := &steppingClock{tick: tick}
	a, err := New(Deps{Config: cfg, Cluster: cluster, JS: e.js, NC: e.nc, MaxPayload: e.nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }, Clock: wallClock(clock.now)})
	if err != nil {
		t.Fatal(err)
	}
	stop := leadUntilServing(t, e, a)
	defer stop()
	// Ticks run in order: once the one after is recorded, tick's runs are done.
	testkit.Eventually(t, 20*time.Second, "the tick after recorded", func() bool {
		return testutil.ToFloat64(a.m.lastTick) >= float64(next.Unix())
	})
	sent := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "sent"))
	dup := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "duplicate"))
	if sent < 2 || dup != 0 {
		t.Errorf("reports_total{schedule}: sent %v, duplicate %v; want tick and the one after sent, no duplicate (tick run twice)", sent, dup)
	}
	if n := testutil.ToFloat64(a.m.missed); n != 0 {
		t.Errorf("ticks_missed_total = %v, want 0", n)
	}
}

package actuate

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

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
		seed  []time.Duration
		steps []step
	}{
		{"under the cap", 3, time.Minute, nil, []step{{at: 0}, {at: time.Second}, {at: 2 * time.Second}}},
		{"over the cap waits for the oldest to leave", 2, time.Minute, nil, []step{
			{at: 0}, {at: 10 * time.Second}, {at: 20 * time.Second, wait: 40 * time.Second},
			{at: 59 * time.Second, wait: time.Second},
			{at: time.Minute}, // the first slot left exactly now
			{at: time.Minute, wait: 10 * time.Second},
		}},
		{"no 2N in the first window (a token bucket's burst plus refill)", 2, time.Minute, nil, []step{
			{at: 0}, {at: 0}, {at: 30 * time.Second, wait: 30 * time.Second}, {at: 59 * time.Second, wait: time.Second},
		}},
		{"release frees a slot", 1, time.Minute, nil, []step{
			{at: 0}, {at: time.Second, wait: 59 * time.Second}, {at: 0, release: true}, {at: 2 * time.Second},
		}},
		{"releasing an unknown time changes nothing", 1, time.Minute, nil, []step{
			{at: 0}, {at: 5 * time.Second, release: true}, {at: 6 * time.Second, wait: 54 * time.Second},
		}},
		{"seeded actions of an earlier leader count", 2, time.Minute, []time.Duration{-50 * time.Second, -10 * time.Second}, []step{
			{at: 0, wait: 10 * time.Second}, {at: 10 * time.Second}, {at: 11 * time.Second, wait: 39 * time.Second},
		}},
		{"more seeded than max: wait until enough left", 1, time.Minute, []time.Duration{-40 * time.Second, -30 * time.Second, -20 * time.Second}, []step{
			{at: 0, wait: 40 * time.Second}, {at: 40 * time.Second},
		}},
		{"seeded actions out of order", 2, time.Minute, []time.Duration{-10 * time.Second, -50 * time.Second}, []step{
			{at: 0, wait: 10 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWindow(tc.max, tc.per)
			var seed []time.Time
			for _, d := range tc.seed {
				seed = append(seed, t0.Add(d))
			}
			w.Seed(seed)
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
			t.Fatalf("%d actions within 1s starting at %v", n, granted[i].Sub(t0))
		}
	}
	if got := granted[99].Sub(t0); got < 4*time.Second || got >= 5*time.Second {
		t.Fatalf("100th action at +%v, want in [4s,5s)", got)
	}
}

// TestSeedFromOPS: a new leader's window holds the actions stored on its
// action subjects during the last window, and nothing else: not older
// actions, not skips or dry runs, not another actor's actions.
func TestSeedFromOPS(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	var last uint64
	pub := func(subj, id string) {
		t.Helper()
		ev, _ := envelope.New(id, "opswire/c/cordon", "t.v1", "", map[string]int{}, time.Now())
		ack, err := natsx.PublishEvent(ctx, js, subj, ev, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	st, err := js.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	pub("ops.c.cordon.cordoned.old", "old")
	old, err := st.GetMsg(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	pub("ops.c.cordon.cordoned.a", "a")
	pub("ops.c.cordon.uncordoned.b", "b")
	pub("ops.c.cordon.skipped.c", "c")
	pub("ops.c.cordon.dryrun.d", "d")
	pub("ops.c.cleanup.deleted.ns.p", "e")
	pub("ops.other.cordon.cordoned.f", "f")
	filters := []string{"ops.c.cordon.cordoned.>", "ops.c.cordon.uncordoned.>"}

	// Since just after "old": the two real actions after it.
	times, err := RecentActions(ctx, js, filters, old.Time.Add(time.Nanosecond))
	if err != nil || len(times) != 2 {
		t.Fatalf("RecentActions = %v, %v; want the times of a and b", times, err)
	}
	if times[0].Before(old.Time) {
		t.Fatalf("action times are the store times: %v before %v", times[0], old.Time)
	}
	// A leader's window of a minute: all three real actions count.
	w := NewWindow(3, time.Minute)
	m := NewMetrics(nil)
	if err := SeedFromOPS(ctx, js, w, filters, m, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if got := w.Len(time.Now()); got != 3 {
		t.Fatalf("seeded %d actions, want 3", got)
	}
	if got := w.Reserve(time.Now()); got <= 0 {
		t.Fatal("a fourth action within the window was allowed")
	}
	// Nothing on the filter: nothing seeded, no error.
	times, err = RecentActions(ctx, js, []string{"ops.c.report.>"}, time.Now().Add(-time.Hour))
	if err != nil || len(times) != 0 {
		t.Fatalf("RecentActions on an unused subject = %v, %v", times, err)
	}
	// The consumers are gone afterwards.
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left on OPS", info.State.Consumers)
	}
}

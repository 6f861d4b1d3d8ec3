package actuate

import (
	"context"
	"slices"
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

// TestWindowHold: a held slot counts until it is settled or released,
// however long that takes, and then from its last write's answer.
func TestWindowHold(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	w := NewWindow(1, time.Minute)
	s, wait := w.Hold(at(0))
	if s == nil || wait != 0 {
		t.Fatalf("Hold on an empty window = %v, %v", s, wait)
	}
	if _, wait := w.Hold(at(2 * time.Minute)); wait != time.Minute {
		t.Fatalf("Hold beside a slot held for 2m waits %v, want a whole window (it counts as an action now)", wait)
	}
	s.Wrote(at(2*time.Minute + 30*time.Second)) // a PATCH answers ...
	s.Wrote(at(2*time.Minute + 10*time.Second)) // (an earlier time never moves it back)
	if _, wait := w.Hold(at(3 * time.Minute)); wait != time.Minute {
		t.Fatalf("Hold beside a slot between two writes waits %v, want a whole window", wait)
	}
	s.Settle(at(2*time.Minute + 31*time.Second)) // ... and the action ends
	s.Settle(at(10 * time.Minute))               // (once)
	if _, wait := w.Hold(at(3 * time.Minute)); wait != 30*time.Second {
		t.Fatalf("Hold after the settled action waits %v, want 30s (a minute after its last write)", wait)
	}
	s.Release() // after Settle: a later read showed nothing was written
	s.Release()
	if n := w.Len(at(3 * time.Minute)); n != 0 {
		t.Fatalf("Len = %d after a Release of a settled slot, want 0", n)
	}

	w = NewWindow(2, time.Minute)
	w.Seed([]time.Time{at(-50 * time.Second)})
	s, _ = w.Hold(at(0))
	if _, wait := w.Hold(at(0)); wait != 10*time.Second {
		t.Fatalf("Hold beside a seeded action and a held one waits %v, want 10s (the seeded one leaves first)", wait)
	}
	s.Release()
	s.Release()
	if n := w.Len(at(0)); n != 1 {
		t.Fatalf("Len = %d after releasing the held slot twice, want the seeded 1", n)
	}
	s, _ = w.Hold(at(0))
	s.Settle(at(5 * time.Second)) // no write reported: counts from the end
	if _, wait := w.Hold(at(5 * time.Second)); wait != 5*time.Second {
		t.Fatalf("Hold waits %v, want 5s (the seeded action leaves)", wait)
	}
	if _, wait := w.Hold(at(10 * time.Second)); wait != 0 {
		t.Fatalf("Hold waits %v once the seeded action left, want 0", wait)
	}
	if _, wait := w.Hold(at(10 * time.Second)); wait != 55*time.Second {
		t.Fatalf("Hold waits %v, want 55s (a minute after the settled action, before the held one)", wait)
	}

	var none *Slot // no window: dry run
	none.Wrote(t0)
	none.Settle(t0)
	none.Release()
}

// TestWindowHeldSlotsNeverExceedMaxAtTheWrite drives actions whose write
// reaches the API a varying while after the slot was taken (up to three
// windows), through a 5-per-second window, and checks every sliding second
// of write times holds at most 5.
func TestWindowHeldSlotsNeverExceedMaxAtTheWrite(t *testing.T) {
	const max, per = 5, time.Second
	w := NewWindow(max, per)
	type action struct {
		slot  *Slot
		write time.Time
	}
	var inFlight []action
	var writes []time.Time
	delays := []time.Duration{0, 30 * time.Millisecond, 900 * time.Millisecond, 3 * time.Second, 10 * time.Millisecond, 1500 * time.Millisecond}
	for now, i := t0, 0; len(writes) < 100; now = now.Add(10 * time.Millisecond) {
		kept := inFlight[:0]
		for _, a := range inFlight {
			if a.write.After(now) {
				kept = append(kept, a)
				continue
			}
			writes = append(writes, a.write)
			a.slot.Wrote(a.write)
			a.slot.Settle(now)
		}
		inFlight = kept
		if s, wait := w.Hold(now); wait == 0 {
			inFlight = append(inFlight, action{s, now.Add(delays[i%len(delays)])})
			i++
		}
	}
	slices.SortFunc(writes, func(a, b time.Time) int { return a.Compare(b) })
	for i := range writes {
		n := 0
		for _, x := range writes[i:] {
			if x.Sub(writes[i]) < per {
				n++
			}
		}
		if n > max {
			t.Fatalf("%d writes within %v from +%v", n, per, writes[i].Sub(t0))
		}
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

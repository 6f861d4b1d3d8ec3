package actuate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
)

// recorder is a synchronous Audit that remembers what it was given.
type recorder struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (r *recorder) Publish(subj string, ev envelope.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, ev.Msg(subj))
}

// outcome builds the outcome audit of a removal of pod ns/name.
func outcome(t *testing.T, uid, name string) (string, envelope.Event) {
	t.Helper()
	ev, err := envelope.New("cleanup/"+uid+"/deleted", "opswire/c/cleanup", events.TypeCleanup, "ns/"+name,
		events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: name, PodUID: uid}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return "ops.c.cleanup.deleted.ns." + name, ev
}

func journal(t *testing.T, j *Journal, uid, name string) (string, envelope.Event) {
	t.Helper()
	osubj, oev := outcome(t, uid, name)
	isubj, iev, err := NewIntent("c", events.Intent{Actor: "cleanup", Action: "deleted", Kind: "Pod", Namespace: "ns", Name: name, UID: uid}, osubj, oev)
	if err != nil {
		t.Fatal(err)
	}
	if isubj != "ops.c.cleanup.intent.ns."+name || iev.ID != oev.ID+"/intent/"+strconv.FormatInt(oev.Time.UnixNano(), 10) || iev.Type != events.TypeIntent {
		t.Fatalf("intent %s %s %s", isubj, iev.ID, iev.Type)
	}
	if !j.Record(context.Background(), isubj, iev) {
		t.Fatalf("intent %s not stored", iev.ID)
	}
	return osubj, oev
}

// TestSeedAndRecover: a dead leader journaled four removals: a was done and
// audited, b and c were done but their audits were lost (c's pod was
// replaced by another one of the same name), d was not done (the same pod
// is still there). A fifth removal e was made during an outage: audited
// without an intent. The new leader publishes exactly the outcomes of b and
// c, with their own ids and bodies, and its window counts a, b, c, d and e
// once each (a's intent and outcome are one action).
func TestSeedAndRecover(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	j := NewJournal(js, time.Second, m, zerolog.Nop())
	as, ae := journal(t, j, "uid-a", "a")
	if _, err := natsx.PublishEvent(ctx, js, as, ae, time.Second); err != nil {
		t.Fatal(err)
	}
	bs, be := journal(t, j, "uid-b", "b")
	cs, ce := journal(t, j, "uid-c", "c")
	journal(t, j, "uid-d", "d")
	// The same intent again (a retry of d by the same leader): one action.
	journal(t, j, "uid-d", "d")
	es, ee := outcome(t, "uid-e", "e")
	if _, err := natsx.PublishEvent(ctx, js, es, ee, time.Second); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Intents.WithLabelValues("journaled")); got != 5 {
		t.Fatalf("journaled = %v, want 5", got)
	}

	live := map[string]string{"c": "uid-c2", "d": "uid-d"} // name → live UID; a, b gone
	var verified []string
	happened := func(_ context.Context, in events.Intent) (bool, error) {
		verified = append(verified, in.Name)
		uid, ok := live[in.Name]
		return !ok || uid != in.UID, nil
	}
	audit := &recorder{}
	w := NewWindow(10, time.Minute)
	m2 := NewMetrics(nil)
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Happened: happened, Audit: audit}
	if err := SeedAndRecover(ctx, js, w, rec, m2, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if len(verified) != 3 {
		t.Fatalf("verified %v, want b, c, d (a's outcome is in OPS)", verified)
	}
	if len(audit.msgs) != 2 {
		t.Fatalf("%d outcomes published, want b's and c's", len(audit.msgs))
	}
	for i, want := range []struct {
		subj string
		ev   envelope.Event
	}{{bs, be}, {cs, ce}} {
		got := audit.msgs[i]
		if got.Subject != want.subj || got.Header.Get(envelope.HeaderMsgID) != want.ev.ID || string(got.Data) != string(want.ev.Data) ||
			got.Header.Get(envelope.HeaderType) != events.TypeCleanup {
			t.Fatalf("outcome %d = %s %s %s, want %s %s %s", i, got.Subject, got.Header.Get(envelope.HeaderMsgID), got.Data, want.subj, want.ev.ID, want.ev.Data)
		}
		var d events.CleanupDecision
		if err := json.Unmarshal(got.Data, &d); err != nil || d.Verb != "deleted" {
			t.Fatalf("outcome body %s: %v", got.Data, err)
		}
	}
	if got := w.Len(time.Now()); got != 5 {
		t.Fatalf("window holds %d actions, want 5 (a, b, c, d, e once each)", got)
	}
	if got := testutil.ToFloat64(m2.WindowSeeded); got != 5 {
		t.Fatalf("seeded gauge %v, want 5", got)
	}
	for result, want := range map[string]float64{"completed": 2, "done": 1, "pending": 1} {
		if got := testutil.ToFloat64(m2.Intents.WithLabelValues(result)); got != want {
			t.Fatalf("intents %s = %v, want %v", result, got, want)
		}
	}
	// The completed outcomes stored: a second new leader publishes nothing.
	for _, msg := range audit.msgs {
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	audit2 := &recorder{}
	rec.Audit, verified = audit2, nil
	if err := SeedAndRecover(ctx, js, NewWindow(10, time.Minute), rec, nil, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if len(audit2.msgs) != 0 || len(verified) != 1 {
		t.Fatalf("second recovery published %d outcomes and verified %v, want none and only d", len(audit2.msgs), verified)
	}
}

// TestSeedAndRecoverVerifyError: a failed live check publishes nothing and
// is retried; the retry publishes each outcome once.
func TestSeedAndRecoverVerifyError(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	j := NewJournal(js, time.Second, nil, zerolog.Nop())
	journal(t, j, "uid-a", "a")
	journal(t, j, "uid-b", "b")
	calls := 0
	audit := &recorder{}
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: audit,
		Happened: func(_ context.Context, in events.Intent) (bool, error) {
			calls++
			if in.Name == "b" && calls == 2 {
				return false, errors.New("API down")
			}
			return true, nil
		}}
	if err := SeedAndRecover(ctx, js, NewWindow(10, time.Minute), rec, nil, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if len(audit.msgs) != 2 || audit.msgs[0].Subject != "ops.c.cleanup.deleted.ns.a" || audit.msgs[1].Subject != "ops.c.cleanup.deleted.ns.b" {
		t.Fatalf("published %d outcomes, want a's and b's once", len(audit.msgs))
	}
}

// TestSeedAndRecoverLive: the API shows four actions of the actor: a's
// outcome is in OPS, b's intent is (its write happened), and f and g are
// unknown to OPS (done during an outage by a leader that died with their
// audits queued; g twice in the list, and outside the window but inside the
// span). The new leader publishes b's carried outcome and f's and g's rebuilt
// ones once each, and its window counts a, b and f once each; h, Pending
// (intended, the write not shown), counts and is not published; x, on the
// intent subject, and y, in the future, are refused (neither counted nor
// published); k, with a Check the live object denies (a forged record),
// counts as pending and is not published; a failed API read publishes
// nothing, is retried and counted.
func TestSeedAndRecoverLive(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	j := NewJournal(js, time.Second, nil, zerolog.Nop())
	as, ae := outcome(t, "uid-a", "a")
	if _, err := natsx.PublishEvent(ctx, js, as, ae, time.Second); err != nil {
		t.Fatal(err)
	}
	bs, be := journal(t, j, "uid-b", "b")
	fs, fe := outcome(t, "uid-f", "f")
	gs, ge := outcome(t, "uid-g", "g")
	hs, he := outcome(t, "uid-h", "h")
	_, xe := outcome(t, "uid-x", "x")
	ys, ye := outcome(t, "uid-y", "y")
	ks, ke := outcome(t, "uid-k", "k")
	fcheck, kcheck := events.Intent{UID: "uid-f"}, events.Intent{UID: "uid-k"}
	now := time.Now()
	calls := 0
	var since time.Time
	audit := &recorder{}
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: audit,
		Happened: func(_ context.Context, in events.Intent) (bool, error) { return in.UID != "uid-k", nil },
		Live: func(_ context.Context, s time.Time) ([]LiveAction, error) {
			calls++
			since = s
			if calls == 1 {
				return nil, errors.New("API down")
			}
			return []LiveAction{{Time: now, Subject: as, Outcome: ae}, {Time: now, Subject: bs, Outcome: be},
				{Time: now.Add(-time.Second), Subject: fs, Outcome: fe, Check: &fcheck}, {Time: now.Add(-2 * time.Minute), Subject: gs, Outcome: ge},
				{Time: now.Add(-2 * time.Minute), Subject: gs, Outcome: ge}, {Time: now, Subject: hs, Outcome: he, Pending: true},
				{Time: now, Subject: "ops.c.cleanup.intent.ns.x", Outcome: xe}, {Time: now.Add(50 * 365 * 24 * time.Hour), Subject: ys, Outcome: ye},
				{Time: now, Subject: ks, Outcome: ke, Check: &kcheck}}, nil
		}}
	m := NewMetrics(nil)
	w := NewWindow(10, time.Minute)
	if err := SeedAndRecover(ctx, js, w, rec, m, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || time.Since(since) < DefaultRecoverySpan || time.Since(since) > DefaultRecoverySpan+time.Minute {
		t.Fatalf("Live called %d times since %v, want twice since the span's start", calls, time.Since(since))
	}
	var ids []string
	for _, msg := range audit.msgs {
		ids = append(ids, msg.Subject+" "+msg.Header.Get(envelope.HeaderMsgID))
	}
	want := []string{bs + " " + be.ID, fs + " " + fe.ID, gs + " " + ge.ID}
	if len(ids) != len(want) || ids[0] != want[0] || ids[1] != want[1] || ids[2] != want[2] {
		t.Fatalf("published %v, want %v", ids, want)
	}
	if got := w.Len(time.Now()); got != 5 {
		t.Fatalf("window holds %d actions, want 5 (a, b, f, h, k)", got)
	}
	if got := testutil.ToFloat64(m.Intents.WithLabelValues("rebuilt")); got != 2 {
		t.Fatalf("rebuilt = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.Intents.WithLabelValues("pending")); got != 2 {
		t.Fatalf("pending = %v, want 2 (h, k)", got)
	}
	if f, r := testutil.ToFloat64(m.RecoveryFailures), testutil.ToFloat64(m.Recovering); f != 1 || r != 0 {
		t.Fatalf("recovery failures %v, recovering %v; want 1 and 0 once done", f, r)
	}
}

// TestJournalNATSDown: with the server gone the intent is not stored within
// the journal's timeout; Record returns false quickly and counts it.
func TestJournalNATSDown(t *testing.T) {
	s := natstest.Start(t)
	nc, err := nats.Connect(s.ClientURL(), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()
	m := NewMetrics(nil)
	j := NewJournal(js, 300*time.Millisecond, m, zerolog.Nop())
	osubj, oev := outcome(t, "uid-a", "a")
	isubj, iev, err := NewIntent("c", events.Intent{Actor: "cleanup", Action: "deleted", Kind: "Pod", Namespace: "ns", Name: "a", UID: "uid-a"}, osubj, oev)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if j.Record(context.Background(), isubj, iev) {
		t.Fatal("intent stored with the server down")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Record took %v with a 300ms timeout", d)
	}
	if got := testutil.ToFloat64(m.Intents.WithLabelValues("unjournaled")); got != 1 {
		t.Fatalf("unjournaled = %v, want 1", got)
	}
}

// TestSeedAndRecoverUnverifiable: a live action whose check fails for good
// (ErrUnverifiable: a name the API cannot be asked about, a bad request) is
// refused, neither counted nor published, and the recovery completes; one
// whose check fails otherwise (API down) fails the attempt, which is retried.
func TestSeedAndRecoverUnverifiable(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	fs, fe := outcome(t, "uid-f", "f")
	us, ue := outcome(t, "uid-u", "u")
	fcheck, ucheck := events.Intent{UID: "uid-f"}, events.Intent{UID: "uid-u"}
	now := time.Now()
	checks := 0
	audit := &recorder{}
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: audit,
		Happened: func(_ context.Context, in events.Intent) (bool, error) {
			checks++
			switch {
			case in.UID == "uid-u":
				return false, fmt.Errorf("re-read: %w: invalid resource name", ErrUnverifiable)
			case checks == 1:
				return false, errors.New("API down")
			}
			return true, nil
		},
		Live: func(context.Context, time.Time) ([]LiveAction, error) {
			return []LiveAction{{Time: now, Subject: fs, Outcome: fe, Check: &fcheck}, {Time: now, Subject: us, Outcome: ue, Check: &ucheck}}, nil
		}}
	m := NewMetrics(nil)
	w := NewWindow(10, time.Minute)
	if err := SeedAndRecover(ctx, js, w, rec, m, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if len(audit.msgs) != 1 || audit.msgs[0].Subject != fs {
		t.Fatalf("published %d outcomes, want f's only", len(audit.msgs))
	}
	if got := w.Len(time.Now()); got != 1 {
		t.Fatalf("window holds %d actions, want 1 (f)", got)
	}
	if f := testutil.ToFloat64(m.RecoveryFailures); f != 1 {
		t.Fatalf("recovery failures %v, want 1 (the transient error)", f)
	}
}

// TestSeedAndRecoverUnverifiableIntent: an OPS intent whose object the API
// cannot be asked about (ErrUnverifiable) does not hold the recovery back:
// it counts in the window as pending and nothing is published for it, while
// the other intent is verified and audited as usual.
func TestSeedAndRecoverUnverifiableIntent(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	j := NewJournal(js, time.Second, nil, zerolog.Nop())
	journal(t, j, "uid-a", "a")
	journal(t, j, "uid-u", "u")
	audit := &recorder{}
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: audit,
		Happened: func(_ context.Context, in events.Intent) (bool, error) {
			if in.UID == "uid-u" {
				return false, fmt.Errorf("re-read: %w: invalid resource name", ErrUnverifiable)
			}
			return true, nil
		}}
	w := NewWindow(10, time.Minute)
	if err := SeedAndRecover(ctx, js, w, rec, nil, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	if len(audit.msgs) != 1 || audit.msgs[0].Subject != "ops.c.cleanup.deleted.ns.a" {
		t.Fatalf("published %d outcomes, want a's only", len(audit.msgs))
	}
	if got := w.Len(time.Now()); got != 2 {
		t.Fatalf("window holds %d actions, want 2 (a, and u as pending)", got)
	}
}

// TestSeedAndRecoverCountsTheLatestAttempt: a removal's first attempt
// journals its intent and its write fails (slot given back); the retry
// journals its own intent (one id per attempt: both are stored) and writes.
// a's outcome was stored, b's was lost with its leader. The next leader
// counts a at its outcome's store time and b at its retry's intent, not at
// their first intents (a retry delay, up to minutes, before the writes: the
// review found a removal written 1 s before the failover not counted).
func TestSeedAndRecoverCountsTheLatestAttempt(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)
	j := NewJournal(js, time.Second, nil, zerolog.Nop())
	journal(t, j, "uid-a", "a") // the first attempts ...
	journal(t, j, "uid-b", "b")
	osubj, oev := journal(t, j, "uid-a", "a") // ... and the retries
	if _, err := natsx.PublishEvent(ctx, js, osubj, oev, time.Second); err != nil {
		t.Fatal(err)
	}
	journal(t, j, "uid-b", "b")
	intents, err := readOPS(ctx, js, "ops.c.cleanup.intent.>", start)
	if err != nil || len(intents) == 0 {
		t.Fatalf("no intents read back: %v", err)
	}
	if len(intents) != 4 {
		t.Errorf("%d intents stored, want both attempts of a and b (a retry's intent dropped as a duplicate?)", len(intents))
	}
	outcomes, err := readOPS(ctx, js, "ops.c.cleanup.deleted.>", start)
	if err != nil || len(outcomes) != 1 {
		t.Fatalf("%d outcomes stored (%v), want a's", len(outcomes), err)
	}
	const per = time.Minute
	w := NewWindow(2, per)
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"},
		Happened: func(context.Context, events.Intent) (bool, error) { return true, nil }, Audit: &recorder{}}
	if err := SeedAndRecover(ctx, js, w, rec, nil, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	// An action seeded at s is in the window ending at x while s > x-per.
	a, b := outcomes[0].Time, intents[len(intents)-1].Time
	for _, probe := range []struct {
		at   time.Time
		want int
	}{
		{a.Add(per - time.Nanosecond), 2}, {a.Add(per), 1}, // a counts from its outcome ...
		{b.Add(per - time.Nanosecond), 1}, {b.Add(per), 0}, // ... b from its retry's intent
	} {
		if got := w.Len(probe.at); got != probe.want {
			t.Fatalf("window at +%v holds %d, want %d: a seeded at its first intent (+%v) rather than its outcome (+%v), or b at its first (+%v) rather than its retry's (+%v)?",
				probe.at.Sub(start), got, probe.want, intents[0].Time.Sub(start), a.Sub(start), intents[1].Time.Sub(start), intents[len(intents)-1].Time.Sub(start))
		}
	}
}

// TestSeedAndRecoverCountsALateCommitFromItsRead: the old leader's write of
// a lost its answer as its term ended, and the new leader's recovery finds
// the object unchanged (Happened: not decided yet, an error that retries the
// recovery) until the late commit lands 700 ms after the intent; the next
// attempt completes the intent. The write happened at the commit, not at its
// intent: with Recovery.LateCommit it counts in the window from the read that
// showed it (at most LateCommit after its intent), as the old leader counts a
// write in doubt from the read that decides it. Counted from its intent it
// freed its slot that much early, and the new leader's next write went out
// less than Per after the commit (cordon: a late commit 30 s into a window of
// 1 per minute let the next cordon through 30 s after it).
func TestSeedAndRecoverCountsALateCommitFromItsRead(t *testing.T) {
	const per = 3 * time.Second
	for _, tc := range []struct {
		name       string
		lateCommit time.Duration
		from       string // when the write counts: "read", "horizon" or "intent"
	}{
		{"seen within the horizon: from the read", 10 * time.Second, "read"},
		{"seen past the horizon: from the horizon", 200 * time.Millisecond, "horizon"},
		{"no horizon: from the intent", 0, "intent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := natstest.Connect(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
				t.Fatal(err)
			}
			start := time.Now().Add(-time.Second)
			journal(t, NewJournal(js, time.Second, nil, zerolog.Nop()), "uid-a", "a")
			intents, err := readOPS(ctx, js, "ops.c.cleanup.intent.>", start)
			if err != nil || len(intents) != 1 {
				t.Fatalf("%d intents read back (%v), want a's", len(intents), err)
			}
			stored := intents[0].Time
			commit := time.Now().Add(700 * time.Millisecond)
			var seen time.Time
			rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: &recorder{},
				LateCommit: tc.lateCommit,
				Happened: func(context.Context, events.Intent) (bool, error) {
					if time.Now().Before(commit) {
						return false, errors.New("unchanged, and the write may still commit")
					}
					seen = time.Now()
					return true, nil
				}}
			w := NewWindow(1, per)
			if err := SeedAndRecover(ctx, js, w, rec, nil, zerolog.Nop(), nil); err != nil {
				t.Fatal(err)
			}
			if seen.IsZero() {
				t.Fatal("the recovery completed without seeing the write")
			}
			// An action seeded at s is in the window ending at x while s > x-per.
			from, slack := stored, time.Duration(0)
			switch tc.from {
			case "read":
				from, slack = seen, 100*time.Millisecond // counted just after the read returned
			case "horizon":
				from = stored.Add(tc.lateCommit)
			}
			if got := w.Len(from.Add(per - time.Nanosecond)); got != 1 {
				t.Errorf("window at %s after the intent holds %d, want 1: the write (intent stored, seen happened %s after it) freed its slot before %s + Per",
					from.Add(per-time.Nanosecond).Sub(stored), got, seen.Sub(stored), tc.from)
			}
			if got := w.Len(from.Add(per + slack)); got != 0 {
				t.Errorf("window at %s after the intent holds %d, want 0: counted later than %s", from.Add(per+slack).Sub(stored), got, tc.from)
			}
		})
	}
}

// TestKnownActions: each action OPS knows counts once, at the latest of its
// records: a retried one at its outcome or at a later attempt the API shows
// (an Event written while OPS was away), even when its first intent is older
// than the window.
func TestKnownActions(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	intents := map[string]openIntent{"a": {at: at(-90)}, "b": {at: at(-10)}, "c": {at: at(-80)}, "old": {at: at(-90)}}
	outcomes := map[string]time.Time{"a": at(-30), "b": at(-9), "u": at(-5), "gone": at(-70)}
	known := map[string]time.Time{"c": at(-2), "b": at(-20)}
	times, unjournaled := knownActions(intents, outcomes, known, at(-60))
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	want := []time.Time{at(-30), at(-9), at(-5), at(-2)} // a's outcome, b's, u's, c's Event
	if !slices.Equal(times, want) || unjournaled != 1 {
		t.Fatalf("knownActions = %v, %d unjournaled; want %v, 1 (u)", times, unjournaled, want)
	}
}

// TestSeedAndRecoverHandsHappenedTheAnswer: an attempt's answer record
// (NewAnswer: its writes were answered, none can still commit) reaches
// Happened as the intent marked Answered, so an actor need not wait out the
// late-commit horizon for it. It closes its own attempt only: a's answered
// attempt is marked; b's answer of attempt 1, stored after attempt 2's
// intent (answer records are stored after the write's answer), leaves
// attempt 2 open; c has no answer; d's answer without its intent (older than
// the span, or never stored) is no intent at all.
func TestSeedAndRecoverHandsHappenedTheAnswer(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	j := NewJournal(js, time.Second, nil, zerolog.Nop())
	attempt := func(name string, n int) (string, envelope.Event) {
		osubj, oev := outcome(t, "uid-"+name, name)
		isubj, iev, err := NewIntent("c", events.Intent{Actor: "cleanup", Action: "deleted", Kind: "Pod", Namespace: "ns", Name: name,
			UID: "uid-" + name, Time: oev.Time.Add(time.Duration(n) * time.Second)}, osubj, oev)
		if err != nil {
			t.Fatal(err)
		}
		return isubj, iev
	}
	record := func(subj string, ev envelope.Event) {
		if !j.Record(ctx, subj, ev) {
			t.Fatalf("intent %s not stored", ev.ID)
		}
	}
	answer := func(subj string, ev envelope.Event) {
		if !j.Answer(ctx, subj, ev, "refused") {
			t.Fatalf("answer of %s not stored", ev.ID)
		}
	}
	as, a1 := attempt("a", 1)
	record(as, a1)
	answer(as, a1)
	bs, b1 := attempt("b", 1)
	_, b2 := attempt("b", 2)
	record(bs, b1)
	record(bs, b2)
	answer(bs, b1) // attempt 1's answer, stored after attempt 2's intent
	cs, c1 := attempt("c", 1)
	record(cs, c1)
	ds, d1 := attempt("d", 1)
	answer(ds, d1)

	got := map[string]events.Intent{}
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: &recorder{},
		Happened: func(_ context.Context, in events.Intent) (bool, error) {
			got[in.Name] = in
			return false, nil
		}}
	if err := SeedAndRecover(ctx, js, NewWindow(10, time.Minute), rec, nil, zerolog.Nop(), nil); err != nil {
		t.Fatal(err)
	}
	var b2in events.Intent
	if err := json.Unmarshal(b2.Data, &b2in); err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		answered string
		at       time.Time
	}{"a": {"refused", time.Time{}}, "b": {"", b2in.Time}, "c": {"", time.Time{}}}
	if len(got) != len(want) {
		t.Fatalf("Happened asked about %d objects (%v), want a, b and c (d's answer alone is no intent)", len(got), got)
	}
	for name, w := range want {
		in, ok := got[name]
		if !ok || in.Answered != w.answered || (!w.at.IsZero() && !in.Time.Equal(w.at)) {
			t.Errorf("%s: Happened got %+v (asked: %v), want answered %q (attempt at %v)", name, in, ok, w.answered, w.at)
		}
	}
}

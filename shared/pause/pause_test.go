package pause

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/testkit"
)

func TestPausedJudgesRecordsByTheClock(t *testing.T) {
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	later, sooner := now.Add(time.Hour), now.Add(time.Minute)
	tests := []struct {
		name      string
		recs      map[string]Record
		wantOK    bool
		wantUntil time.Time
	}{
		{"none", nil, false, time.Time{}},
		{"own", map[string]Record{"cordon": {Until: later}}, true, later},
		{"all", map[string]Record{All: {Until: later}}, true, later},
		{"expired", map[string]Record{"cordon": {Until: now}}, false, time.Time{}},
		{"until resumed", map[string]Record{"cordon": {}}, true, time.Time{}},
		{"the longer of two", map[string]Record{"cordon": {Until: sooner}, All: {Until: later}}, true, later},
		{"an expired one leaves the other", map[string]Record{"cordon": {Until: now.Add(-time.Second)}, All: {Until: sooner}}, true, sooner},
		{"until resumed outlasts a time", map[string]Record{"cordon": {Until: later}, All: {}}, true, time.Time{}},
		{"another actor's", map[string]Record{"cleanup": {Until: later}}, false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWatcher(nil, WatcherConfig{Cluster: "c1", Actor: "cordon", Now: func() time.Time { return now }}, zerolog.Nop())
			for a, r := range tt.recs {
				w.recs[a] = r
			}
			r, ok := w.Paused()
			if ok != tt.wantOK || !r.Until.Equal(tt.wantUntil) {
				t.Fatalf("Paused() = %+v, %v; want until %v, %v", r, ok, tt.wantUntil, tt.wantOK)
			}
		})
	}
}

func TestWatcherFollowsTheBucket(t *testing.T) {
	natstest.Start(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	store := Store{KV: kv, Cluster: "c1"}
	// Stored before the watch starts: loaded with the initial values.
	if err := store.Pause(ctx, "cleanup", Record{Since: time.Now(), Until: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w := NewWatcher(kv, WatcherConfig{Cluster: "c1", Actor: "cordon", Registry: reg}, zerolog.Nop())
	other := NewWatcher(kv, WatcherConfig{Cluster: "c1", Actor: "cleanup"}, zerolog.Nop())
	go func() { _ = w.Run(ctx) }()
	go func() { _ = other.Run(ctx) }()
	if err := w.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Paused(); ok {
		t.Fatal("cordon paused by cleanup's record")
	}
	if _, ok := other.Paused(); !ok {
		t.Fatal("cleanup's stored record not loaded")
	}

	// Another cluster's record holds nothing here.
	if err := (Store{KV: kv, Cluster: "c2"}).Pause(ctx, "cordon", Record{Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.Pause(ctx, "cordon", Record{Since: time.Now(), Until: time.Now().Add(2 * time.Second), By: "sre", Reason: "incident"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "cordon paused within 1 s", func() bool { _, ok := w.Paused(); return ok })
	if got := testutil.ToFloat64(reg); got != 1 {
		t.Fatalf("opswire_paused = %v while paused, want 1", got)
	}
	// It ends by itself at Until, with nothing written.
	testkit.Eventually(t, 5*time.Second, "cordon's pause expired", func() bool { _, ok := w.Paused(); return !ok })
	if got := testutil.ToFloat64(reg); got != 0 {
		t.Fatalf("opswire_paused = %v after Until, want 0", got)
	}

	if err := store.Pause(ctx, All, Record{Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "cordon paused by all", func() bool { _, ok := w.Paused(); return ok })
	if err := store.Resume(ctx, All); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Second, "cordon resumed", func() bool { _, ok := w.Paused(); return !ok })
	if _, ok, err := store.Get(ctx, All); err != nil || ok {
		t.Fatalf("Get(all) after resume = %v, %v; want none", ok, err)
	}
	if err := store.Pause(ctx, "watcher", Record{}); err == nil {
		t.Fatal("pausing the watcher accepted")
	}
}

// TestPauseUnderClusterNamesKVKeysRefuse: a cluster name that is one NATS
// subject token but no KV key (eu:prod, an EKS ARN, a Chinese name) pauses
// and resumes its own actors, and only them.
func TestPauseUnderClusterNamesKVKeysRefuse(t *testing.T) {
	natstest.Start(t)
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := EnsureBucket(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"eu:prod", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", "北京生产"}
	watchers := map[string]*Watcher{}
	for _, name := range names {
		w := NewWatcher(kv, WatcherConfig{Cluster: name, Actor: "cordon"}, zerolog.Nop())
		go func() { _ = w.Run(ctx) }()
		if err := w.WaitSynced(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		watchers[name] = w
	}
	for _, name := range names {
		store := Store{KV: kv, Cluster: name}
		if err := store.Pause(ctx, "cordon", Record{Since: time.Now()}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		testkit.Eventually(t, time.Second, name+" paused", func() bool { _, ok := watchers[name].Paused(); return ok })
		for _, other := range names {
			if _, ok := watchers[other].Paused(); ok && other != name {
				t.Fatalf("%s paused by %s's record", other, name)
			}
		}
		if err := store.Resume(ctx, "cordon"); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		testkit.Eventually(t, time.Second, name+" resumed", func() bool { _, ok := watchers[name].Paused(); return !ok })
	}
}

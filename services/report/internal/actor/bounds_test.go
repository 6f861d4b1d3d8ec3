package actor

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opswire/opswire/services/report/internal/images"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// TestRequestsAreBounded: on-demand reports are rate-limited per leader, and
// a request without a reply subject is not run.
func TestRequestsAreBounded(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	ops := e.collect("ops.*.report.restarts")
	cfg := testConfig(t, "sendReport:\n  schedule: \"@yearly\"\n  requestEvery: 1h\n  requestBurst: 2\nimageAlert:\n  enable: false\n")
	a, _, _ := e.lead(cfg)

	// Published without a reply subject: counted, ignored, nothing stored.
	for i := 0; i < 5; i++ {
		if err := e.nc.Publish(subject.Ctl(cluster, Service, "run"), nil); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "the publishes counted as noreply", func() bool {
		return testutil.ToFloat64(a.m.requests.WithLabelValues("noreply")) == 5
	})
	for i := 0; i < 2; i++ {
		if r := e.request(); r.Error != "" || r.ID == "" {
			t.Fatalf("request %d within the burst: %+v", i+1, r)
		}
	}
	r := e.request()
	if r.ID != "" || !strings.Contains(r.Error, "rate limited") {
		t.Fatalf("third request: %+v, want rate limited", r)
	}
	if v := testutil.ToFloat64(a.m.requests.WithLabelValues("limited")); v != 1 {
		t.Fatalf("limited requests %v, want 1", v)
	}
	// Counted at the source: the refused requests never ran.
	if v := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerRequest, "sent")); v != 2 {
		t.Fatalf("%v on-demand reports sent, want 2 (5 publishes without reply and 1 limited request run nothing)", v)
	}
	eventually(t, 5*time.Second, "two reports", func() bool { return len(ops.reports(t)) == 2 })
}

// TestImageMemoryByNodeUID: a node re-created under the same name does not
// inherit the old node's memory, and a tombstone drops the memory at once.
func TestImageMemoryByNodeUID(t *testing.T) {
	e := newEnv(t)
	ops := e.collect("ops.*.report.images.>")
	cfg := testConfig(t, "sendReport:\n  enable: false\nimageAlert:\n  maxBytes: 1000\n  maxPercent: 0\n  cooldown: 1h\n")
	_, _, stop := e.lead(cfg)
	e.nodeUID("n1", "uid-old", 1200)
	eventually(t, 10*time.Second, "the first alert", func() bool { return len(ops.alerts(t)) == 1 })
	st := kvStore(t, e)
	eventually(t, 5*time.Second, "the memory stored under the UID", func() bool {
		m, err := st.LoadImageMemory(e.ctx)
		return err == nil && m["uid-old"].Active && m["uid-old"].Node == "n1"
	})

	// Deleted and re-created with the same name and a new UID, within the
	// cooldown: a new node alerts on its own first crossing.
	e.nodeUID("n1", "uid-new", 1300)
	eventually(t, 10*time.Second, "the re-created node's alert", func() bool { return len(ops.alerts(t)) == 2 })
	if a := ops.alerts(t)[1]; a.NodeUID != "uid-new" || a.Reason != images.ReasonMaxBytes {
		t.Fatalf("second alert %+v, want maxBytes for uid-new", a)
	}
	eventually(t, 5*time.Second, "only the new UID remembered", func() bool {
		m, err := st.LoadImageMemory(e.ctx)
		_, old := m["uid-old"]
		return err == nil && !old && m["uid-new"].Active
	})

	// The tombstone drops the memory while the leader runs.
	e.publish(subject.Node(cluster, "n1"), events.TypeNode, events.NodeState{Op: events.OpDelete, UID: "uid-new", Name: "n1"})
	eventually(t, 5*time.Second, "the memory dropped on the tombstone", func() bool {
		m, err := st.LoadImageMemory(e.ctx)
		return err == nil && len(m) == 0
	})
	stop()
}

// TestTickDeadline: a tick that cannot be stored is retried until
// tick+catchUp, or until the next tick when that is sooner; without
// catch-up, for the fixed retry window. Either stays within the dedup window.
func TestTickDeadline(t *testing.T) {
	tick := time.Date(2025, 1, 6, 10, 0, 0, 0, time.UTC) // a Monday
	tests := []struct {
		name, yaml string
		want       time.Time
	}{
		{"weekly: catchUp", "sendReport:\n  schedule: \"0 0 10 * * 1\"\n", tick.Add(9 * time.Minute)},
		{"every minute: the next tick", "sendReport:\n  schedule: \"0 * * * * *\"\n", tick.Add(time.Minute)},
		{"catch-up disabled: the fixed retry", "sendReport:\n  schedule: \"0 0 10 * * 1\"\n  catchUp: 0\n", tick.Add(2 * time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t, tc.yaml)
			a, err := New(Deps{Config: cfg, Cluster: cluster, Getenv: func(string) string { return "" }})
			if err != nil {
				t.Fatal(err)
			}
			r := &reporter{a: a}
			if got := r.deadline(tick); !got.Equal(tc.want) {
				t.Fatalf("deadline %s, want %s", got, tc.want)
			}
			if got := r.deadline(tick).Sub(tick); got+30*time.Second > cfg.NATS.Duplicates.Duration {
				t.Fatalf("retry window %s outlasts the dedup window %s", got, cfg.NATS.Duplicates.Duration)
			}
		})
	}
}

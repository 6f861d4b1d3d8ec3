package actor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opswire/opswire/services/report/internal/images"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
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
	testkit.Eventually(t, 5*time.Second, "the publishes counted as noreply", func() bool {
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
	testkit.Eventually(t, 5*time.Second, "two reports", func() bool { return len(ops.reports(t)) == 2 })
}

// TestImageMemoryByNodeUID: a node re-created under the same name does not
// inherit the old node's memory, and a tombstone drops the memory at once.
func TestImageMemoryByNodeUID(t *testing.T) {
	e := newEnv(t)
	ops := e.collect("ops.*.report.images.>")
	cfg := testConfig(t, "sendReport:\n  enable: false\nimageAlert:\n  maxBytes: 1000\n  maxPercent: 0\n  cooldown: 1h\n")
	_, _, stop := e.lead(cfg)
	e.nodeUID("n1", "uid-old", 1200)
	testkit.Eventually(t, 10*time.Second, "the first alert", func() bool { return len(ops.alerts(t)) == 1 })
	st := kvStore(t, e)
	testkit.Eventually(t, 5*time.Second, "the memory stored under the UID", func() bool {
		m, err := st.LoadImageMemory(e.ctx)
		return err == nil && m["uid-old"].Active && m["uid-old"].Node == "n1"
	})

	// Deleted and re-created with the same name and a new UID, within the
	// cooldown: a new node alerts on its own first crossing.
	e.nodeUID("n1", "uid-new", 1300)
	testkit.Eventually(t, 10*time.Second, "the re-created node's alert", func() bool { return len(ops.alerts(t)) == 2 })
	if a := ops.alerts(t)[1]; a.NodeUID != "uid-new" || a.Reason != images.ReasonMaxBytes {
		t.Fatalf("second alert %+v, want maxBytes for uid-new", a)
	}
	testkit.Eventually(t, 5*time.Second, "only the new UID remembered", func() bool {
		m, err := st.LoadImageMemory(e.ctx)
		_, old := m["uid-old"]
		return err == nil && !old && m["uid-new"].Active
	})

	// The tombstone drops the memory while the leader runs.
	e.publish(subject.Node(cluster, "n1"), events.TypeNode, events.NodeState{Op: events.OpDelete, UID: "uid-new", Name: "n1"})
	testkit.Eventually(t, 5*time.Second, "the memory dropped on the tombstone", func() bool {
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

// TestReportBudget: restart reports keep to sendReport.opsBudgetBytes of OPS.
// On-demand reports are refused once it is used up; scheduled reports are
// still stored, cut to the summary; a new leader counts what is stored.
func TestReportBudget(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 150; i++ {
		e.pod("shop", fmt.Sprintf("crashy-%03d", i), 150)
	}
	ops := e.collect("ops.*.report.restarts")
	// About 25 KB per full report: two fit in 64 KiB, a third does not.
	cfg := testConfig(t, "sendReport:\n  schedule: \"@yearly\"\n  requestEvery: 1ms\n  requestBurst: 100\n  opsBudgetBytes: 65536\nimageAlert:\n  enable: false\n")
	a, _, stop := e.lead(cfg)
	var refused RunReply
	for i := 0; i < 5; i++ {
		if r := e.request(); r.Error != "" {
			refused = r
			break
		}
	}
	if !strings.Contains(refused.Error, "report budget used up") {
		t.Fatalf("requests never refused by the budget (last reply %+v)", refused)
	}
	sent := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerRequest, "sent"))
	if sent < 1 || sent > 3 || testutil.ToFloat64(a.m.reports.WithLabelValues(triggerRequest, "overbudget")) != 1 {
		t.Fatalf("%v on-demand reports sent before the budget refused one", sent)
	}
	if used := testutil.ToFloat64(a.m.budgetUsed); used <= 0 || used > 65536 {
		t.Fatalf("budget used %v, want within (0, 65536]", used)
	}

	stop()

	// A new leader counts what OPS holds (the sizes come from KV): its
	// request is refused too. The tick it catches up is scheduled: never
	// refused, its rows cut to what is left.
	cfg = testConfig(t, "sendReport:\n  schedule: \"@hourly\"\n  opsBudgetBytes: 65536\n  catchUp: 2h\nnats:\n  duplicates: 3h\nimageAlert:\n  enable: false\n")
	prevTick := time.Now().Truncate(time.Hour).Add(-time.Hour) // the tick before the last one
	if err := kvStore(t, e).SetLastTick(e.ctx, prevTick); err != nil {
		t.Fatal(err)
	}
	b, _, stop := e.lead(cfg)
	if r := e.request(); !strings.Contains(r.Error, "report budget used up") {
		t.Fatalf("request to the new leader: %+v, want refused by the budget", r)
	}
	testkit.Eventually(t, 10*time.Second, "the caught-up scheduled report", func() bool { return len(scheduledOnly(ops.reports(t))) == 1 })
	sched := scheduledOnly(ops.reports(t))[0]
	if sched.Offenders != 150 || len(sched.Rows) >= 150 || len(sched.Rows)+sched.Truncated != 150 {
		t.Fatalf("scheduled report: %d offenders, %d rows, %d truncated; want the rows cut to the budget", sched.Offenders, len(sched.Rows), sched.Truncated)
	}
	if v := testutil.ToFloat64(b.m.reports.WithLabelValues(triggerSchedule, "sent")); v != 1 {
		t.Fatalf("scheduled reports sent %v, want 1", v)
	}
	stop()
}

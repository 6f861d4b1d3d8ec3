package actor

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/shared/testkit"
)

type switchPause struct{ on atomic.Bool }

func (s *switchPause) Paused() (pause.Record, bool) {
	return pause.Record{By: "sre", Since: time.Unix(1, 0)}, s.on.Load()
}

// A paused report actor sends no scheduled report and still answers a
// person's request; resumed, the schedule sends again.
func TestPausedReportSendsNoScheduledReport(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	ops := e.collect("ops.*.report.restarts")
	cfg := testConfig(t, "sendReport:\n  total: 100\n  schedule: \"@every 1s\"\nimageAlert:\n  enable: false\n")
	p := &switchPause{}
	p.on.Store(true)
	e.pause = p
	a, _, _ := e.lead(cfg)
	testkit.Eventually(t, 10*time.Second, "two ticks held back", func() bool { return testutil.ToFloat64(a.m.paused) >= 2 })
	if n := len(scheduledOnly(ops.reports(t))); n != 0 {
		t.Fatalf("%d scheduled reports sent while paused", n)
	}
	if reply := e.request(); reply.Error != "" || reply.ID == "" {
		t.Fatalf("on-demand request while paused: %+v", reply)
	}
	p.on.Store(false)
	testkit.Eventually(t, 10*time.Second, "a scheduled report after the resume", func() bool { return len(scheduledOnly(ops.reports(t))) >= 1 })
}

package config

import (
	"errors"
	"testing"
	"time"
)

// The seed's sendReport keeps its meaning and every new key is defaulted to
// what does not change it.
func TestReportSectionsDefaultsWithTheSeed(t *testing.T) {
	c, err := Load("testdata/seed.yml")
	if err != nil {
		t.Fatal(err)
	}
	s, i := c.SendReport, c.ImageAlert
	checks := []struct {
		name      string
		got, want any
	}{
		{"sendReport.mode", s.Mode, ReportModeTotal},
		{"sendReport.groupBy", s.GroupBy, GroupByPod},
		{"sendReport.top", s.Top, 0},
		{"sendReport.timezone", s.Timezone, ""},
		{"sendReport.catchUp", s.CatchUp.Duration, 9 * time.Minute},
		{"sendReport.requestEvery", s.RequestEvery.Duration, time.Minute},
		{"sendReport.requestBurst", s.RequestBurst, 3},
		{"sendReport.opsBudgetBytes", s.OpsBudgetBytes, int64(100 << 20)},
		{"imageAlert.truncatedPercent", i.TruncatedPercent, 80.0},
		{"sendReport.namespaces", len(s.Namespaces.Include) + len(s.Namespaces.Exclude), 0},
		{"imageAlert.enable", i.Enable, true},
		{"imageAlert.maxBytes", i.MaxBytes, int64(50 << 30)},
		{"imageAlert.maxPercent", i.MaxPercent, 50.0},
		{"imageAlert.growthBytes", i.GrowthBytes, int64(5 << 30)},
		{"imageAlert.cooldown", i.Cooldown.Duration, time.Hour},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}

func TestReportSectionsParse(t *testing.T) {
	c, err := Parse([]byte(`sendReport:
  schedule: "@every 1h"
  timezone: Asia/Shanghai
  mode: increase
  groupBy: workload
  top: 20
  catchUp: 0
  namespaces:
    include: [prod]
    exclude: [kube-system]
imageAlert:
  maxBytes: 0
  maxPercent: 80
  growthBytes: 1073741824
  cooldown: 30m
  msgtitle: images
`))
	if err != nil {
		t.Fatal(err)
	}
	s, i := c.SendReport, c.ImageAlert
	if s.Mode != ReportModeIncrease || s.GroupBy != GroupByWorkload || s.Top != 20 || s.CatchUp.Duration != 0 ||
		s.Timezone != "Asia/Shanghai" || !s.Namespaces.Allows("prod") || s.Namespaces.Allows("kube-system") {
		t.Fatalf("sendReport %+v", s)
	}
	if i.MaxBytes != 0 || i.MaxPercent != 80 || i.GrowthBytes != 1<<30 || i.Cooldown.Duration != 30*time.Minute || i.MsgTitle != "images" {
		t.Fatalf("imageAlert %+v", i)
	}
}

func TestReportSectionsInvalid(t *testing.T) {
	tests := []struct{ name, doc, field string }{
		{"negative total", "sendReport:\n  total: -1\n", "sendReport.total"},
		{"bad schedule", "sendReport:\n  schedule: \"0 0 25 * * *\"\n", "sendReport.schedule"},
		{"bad time zone", "sendReport:\n  timezone: Mars/Olympus\n", "sendReport.timezone"},
		{"bad mode", "sendReport:\n  mode: delta\n", "sendReport.mode"},
		{"bad groupBy", "sendReport:\n  groupBy: node\n", "sendReport.groupBy"},
		{"negative top", "sendReport:\n  top: -5\n", "sendReport.top"},
		{"negative catchUp", "sendReport:\n  catchUp: -1m\n", "sendReport.catchUp"},
		{"unknown key", "sendReport:\n  thresold: 3\n", "sendReport.thresold"},
		{"percent over 100", "imageAlert:\n  maxPercent: 120\n", "imageAlert.maxPercent"},
		{"no threshold when enabled", "imageAlert:\n  maxBytes: 0\n  maxPercent: 0\n", "imageAlert.maxBytes"},
		{"negative growth", "imageAlert:\n  growthBytes: -1\n", "imageAlert.growthBytes"},
		{"negative cooldown", "imageAlert:\n  cooldown: -1s\n", "imageAlert.cooldown"},
		{"catchUp outlasts the dedup window", "sendReport:\n  catchUp: 15m\n", "sendReport.catchUp"},
		{"dedup window shorter than the default catchUp", "nats:\n  duplicates: 5m\n", "sendReport.catchUp"},
		{"dedup window shorter than the retry without catchUp", "sendReport:\n  catchUp: 0\nnats:\n  duplicates: 1m\n", "sendReport.catchUp"},
		{"zero requestEvery", "sendReport:\n  requestEvery: 0s\n", "sendReport.requestEvery"},
		{"zero requestBurst", "sendReport:\n  requestBurst: 0\n", "sendReport.requestBurst"},
		{"tiny report budget", "sendReport:\n  opsBudgetBytes: 1000\n", "sendReport.opsBudgetBytes"},
		{"report budget over half of OPS", "sendReport:\n  opsBudgetBytes: 600000000\nnats:\n  opsMaxBytes: 1000000000\n", "sendReport.opsBudgetBytes"},
		{"truncatedPercent over 100", "imageAlert:\n  truncatedPercent: 120\n", "imageAlert.truncatedPercent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("err = %v, want field errors", err)
			}
			found := false
			for _, fe := range errs {
				found = found || fe.Field == tc.field
			}
			if !found {
				t.Fatalf("errors %v do not name %s", err, tc.field)
			}
		})
	}
	// Disabled image alerts need no threshold.
	if _, err := Parse([]byte("imageAlert:\n  enable: false\n  maxBytes: 0\n  maxPercent: 0\n")); err != nil {
		t.Fatalf("disabled imageAlert without thresholds: %v", err)
	}
	// A short catch-up fits a short dedup window; a disabled report is not checked.
	if _, err := Parse([]byte("sendReport:\n  catchUp: 20s\nnats:\n  duplicates: 1m\n")); err != nil {
		t.Fatalf("catchUp 20s with duplicates 1m: %v", err)
	}
	if _, err := Parse([]byte("sendReport:\n  enable: false\nnats:\n  duplicates: 1m\n")); err != nil {
		t.Fatalf("disabled report with duplicates 1m: %v", err)
	}
	if _, err := Parse([]byte("sendReport:\n  schedule: \"CRON_TZ=Asia/Shanghai 00 00 10 * * 1\"\n")); err != nil {
		t.Fatalf("CRON_TZ prefix: %v", err)
	}
}

// TestReportScheduleThatNeverFiresIsRejected: a cron line that parses but
// matches no date (February 30) is rejected at start, naming the field;
// accepted, the actor would lead, be ready and never send a report.
func TestReportScheduleThatNeverFiresIsRejected(t *testing.T) {
	_, err := Parse([]byte("sendReport:\n  schedule: \"0 0 10 30 2 *\"\n"))
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("a schedule that never fires (February 30) is accepted (err = %v); want an error naming sendReport.schedule", err)
	}
	for _, fe := range errs {
		if fe.Field == "sendReport.schedule" {
			return
		}
	}
	t.Fatalf("errors %v do not name sendReport.schedule", err)
}

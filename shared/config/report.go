package config

import (
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// Restart report modes and groupings.
const (
	ReportModeTotal    = "total"    // restarts since the pod started (the seed's meaning)
	ReportModeIncrease = "increase" // restarts gained since the previous report
	GroupByPod         = "pod"
	GroupByWorkload    = "workload"
)

// CronParser accepts the seed's 6-field cron with seconds, the usual 5-field
// form and descriptors (@every 1h, @daily).
var CronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// SendReport is the seed's sendReport section (the restart report).
type SendReport struct {
	Enable bool `json:"enable"`
	// Total: pods whose restart count is greater than this are reported.
	Total    int64  `json:"total"`
	Schedule string `json:"schedule"`
	// Timezone of the schedule; empty uses $TZ, then UTC.
	Timezone string `json:"timezone"`
	MsgTitle string `json:"msgtitle"`
	APIURL   Secret `json:"apiurl"`
	// Secret/SecretFile/SecretEnv and Keyword sign the apiurl's receiver
	// (see SeedReceiver in notifier.go).
	Secret     Secret     `json:"secret"`
	SecretFile string     `json:"secretFile"`
	SecretEnv  string     `json:"secretEnv"`
	Keyword    string     `json:"keyword"`
	Mode       string     `json:"mode"`
	GroupBy    string     `json:"groupBy"`
	Top        int        `json:"top"` // 0 = all rows
	Namespaces Namespaces `json:"namespaces"`
	// CatchUp bounds how late a scheduled report may still be stored: a
	// leader retries a tick it could not store (a NATS outage) until
	// tick+catchUp (or the next tick), and a new leader sends the most recent
	// tick no replica recorded as sent if it is at most this old (a leader
	// that died just before a weekly tick must not skip a week). It must stay
	// within the OPS dedup window (nats.duplicates) so every resend of a tick
	// is dropped by JetStream; 0 disables catch-up (a tick is then retried for
	// scheduledRetry).
	CatchUp Duration `json:"catchUp"`
	// RequestEvery and RequestBurst rate-limit on-demand reports
	// (ctl.<cluster>.report.run): a burst of RequestBurst, then one per
	// RequestEvery. Every request builds and stores a full report in OPS.
	RequestEvery Duration `json:"requestEvery"`
	RequestBurst int      `json:"requestBurst"`
	// OpsBudgetBytes is the share of the OPS stream restart reports may take
	// (they age out with nats.opsMaxAge, or as OPS discards its oldest
	// messages), so reports cannot push the cordon and cleanup audit out of
	// OPS. On-demand reports are refused while it is used up; scheduled
	// reports are always stored, their rows cut to what is left.
	OpsBudgetBytes int64 `json:"opsBudgetBytes"`
}

// minOpsBudget is the smallest report budget: a few summaries.
const minOpsBudget = 64 << 10

// scheduledRetry is how long a scheduled report is retried when catch-up is
// disabled.
const scheduledRetry = 2 * time.Minute

// dedupMargin is kept between the last resend of a tick and the end of the
// OPS dedup window: one publish attempt plus clock skew between replicas.
const dedupMargin = 30 * time.Second

// RetryWindow is how long after its tick a scheduled report may still be
// stored: catchUp, or scheduledRetry when catch-up is disabled.
func (s *SendReport) RetryWindow() time.Duration {
	if s.CatchUp.Duration > 0 {
		return s.CatchUp.Duration
	}
	return scheduledRetry
}

// validateWindows keeps every store of one tick's report within one dedup
// window: the first store is at or after the tick, the last attempt starts
// before tick+RetryWindow, so RetryWindow+dedupMargin must not exceed
// nats.duplicates. Otherwise a report sent but not recorded (a crash between
// publish and record, a lost ack) could be stored a second time by a new
// leader, built from another mirror, under the same id.
//
// The report budget must leave at least half of OPS to the other actors.
func (s *SendReport) validateWindows(p string, n NATS, errs *Errors) {
	if s.OpsBudgetBytes < minOpsBudget {
		errs.add(join(p, "opsBudgetBytes"), "must be at least %d (64 KiB)", minOpsBudget)
	} else if s.OpsBudgetBytes > n.OpsMaxBytes/2 {
		errs.add(join(p, "opsBudgetBytes"), "%d is more than half of nats.opsMaxBytes (%d): reports would crowd the cordon and cleanup audit out of OPS",
			s.OpsBudgetBytes, n.OpsMaxBytes)
	}
	if !s.Enable {
		return
	}
	if w := s.RetryWindow(); w+dedupMargin > n.Duplicates.Duration {
		field, what := join(p, "catchUp"), "catchUp "+s.CatchUp.Duration.String()
		if s.CatchUp.Duration == 0 {
			what = "the retry of a tick without catch-up (" + scheduledRetry.String() + ")"
		}
		errs.add(field, "%s plus %s must not exceed nats.duplicates (%s): a tick resent after the dedup window "+
			"would be stored twice; lower catchUp or raise nats.duplicates", what, dedupMargin, n.Duplicates.Duration)
	}
}

func (s *SendReport) setDefaults() {
	s.Enable = true
	s.Total = 100
	s.Schedule = "0 0 10 * * 1"
	s.MsgTitle = "Pods restarting too often"
	s.Mode = ReportModeTotal
	s.GroupBy = GroupByPod
	// Within the default dedup window of 10m (see validateWindows).
	s.CatchUp = D(9 * time.Minute)
	s.RequestEvery = D(time.Minute)
	s.RequestBurst = 3
	s.OpsBudgetBytes = 100 << 20 // a tenth of the default nats.opsMaxBytes
}

func (s *SendReport) validate(p string, errs *Errors) {
	if s.Total < 0 {
		errs.add(join(p, "total"), "must not be negative")
	}
	if sched, err := CronParser.Parse(s.Schedule); err != nil {
		errs.add(join(p, "schedule"), "invalid cron schedule %q: %v", s.Schedule, err)
	} else if sched.Next(time.Now()).IsZero() {
		// A line that parses but matches no date (February 30): the
		// actor would lead, be ready and never send a report.
		errs.add(join(p, "schedule"), "cron schedule %q never fires (it matches no date within five years)", s.Schedule)
	}
	if s.Timezone != "" {
		if _, err := time.LoadLocation(s.Timezone); err != nil {
			errs.add(join(p, "timezone"), "unknown time zone %q", s.Timezone)
		}
	}
	if s.Mode != ReportModeTotal && s.Mode != ReportModeIncrease {
		errs.add(join(p, "mode"), "must be %q or %q, got %q", ReportModeTotal, ReportModeIncrease, s.Mode)
	}
	if s.GroupBy != GroupByPod && s.GroupBy != GroupByWorkload {
		errs.add(join(p, "groupBy"), "must be %q or %q, got %q", GroupByPod, GroupByWorkload, s.GroupBy)
	}
	if s.Top < 0 {
		errs.add(join(p, "top"), "must not be negative")
	}
	if s.CatchUp.Duration < 0 {
		errs.add(join(p, "catchUp"), "must not be negative")
	}
	if s.RequestEvery.Duration <= 0 {
		errs.add(join(p, "requestEvery"), "must be positive")
	}
	if s.RequestBurst < 1 {
		errs.add(join(p, "requestBurst"), "must be at least 1")
	}
}

// ImageAlert configures the node image-storage alert (seed 003).
type ImageAlert struct {
	Enable bool `json:"enable"`
	// MaxBytes and MaxPercent (of the node's ephemeral-storage capacity)
	// are thresholds; 0 disables one.
	MaxBytes   int64   `json:"maxBytes"`
	MaxPercent float64 `json:"maxPercent"`
	// GrowthBytes: after an alert, the next one needs this much more growth.
	GrowthBytes int64    `json:"growthBytes"`
	Cooldown    Duration `json:"cooldown"`
	MsgTitle    string   `json:"msgtitle"`
	// TruncatedPercent: when the kubelet's image list is cut at its limit
	// (50 images unless --node-status-max-images), the listed sum is only a
	// lower bound; such a node alerts (reason truncated) once that lower
	// bound reaches this percentage of a threshold. 100 applies the
	// thresholds to the lower bound only.
	TruncatedPercent float64 `json:"truncatedPercent"`
}

func (i *ImageAlert) setDefaults() {
	i.Enable = true
	i.MaxBytes = 50 << 30
	i.MaxPercent = 50
	i.GrowthBytes = 5 << 30
	i.Cooldown = D(time.Hour)
	i.MsgTitle = "Node image storage"
	i.TruncatedPercent = 80
}

func (i *ImageAlert) validate(p string, errs *Errors) {
	if i.MaxBytes < 0 {
		errs.add(join(p, "maxBytes"), "must not be negative")
	}
	if i.MaxPercent < 0 || i.MaxPercent > 100 {
		errs.add(join(p, "maxPercent"), "must be in [0, 100], got %v", i.MaxPercent)
	}
	if i.Enable && i.MaxBytes == 0 && i.MaxPercent == 0 {
		errs.add(join(p, "maxBytes"), "one of maxBytes or maxPercent must be set when enabled")
	}
	if i.GrowthBytes < 0 {
		errs.add(join(p, "growthBytes"), "must not be negative")
	}
	if i.Cooldown.Duration < 0 {
		errs.add(join(p, "cooldown"), "must not be negative")
	}
	if i.TruncatedPercent <= 0 || i.TruncatedPercent > 100 {
		errs.add(join(p, "truncatedPercent"), "must be in (0, 100], got %v", i.TruncatedPercent)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

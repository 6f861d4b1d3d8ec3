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
	Timezone   string     `json:"timezone"`
	MsgTitle   string     `json:"msgtitle"`
	APIURL     Secret     `json:"apiurl"`
	Mode       string     `json:"mode"`
	GroupBy    string     `json:"groupBy"`
	Top        int        `json:"top"` // 0 = all rows
	Namespaces Namespaces `json:"namespaces"`
	// CatchUp: a new leader sends the most recent scheduled report that no
	// replica recorded as sent if its tick is at most this old (a leader that
	// died just before a weekly tick must not skip a week); 0 disables.
	CatchUp Duration `json:"catchUp"`
}

func (s *SendReport) setDefaults() {
	s.Enable = true
	s.Total = 100
	s.Schedule = "0 0 10 * * 1"
	s.MsgTitle = "Pods restarting too often"
	s.Mode = ReportModeTotal
	s.GroupBy = GroupByPod
	s.CatchUp = D(15 * time.Minute)
}

func (s *SendReport) validate(p string, errs *Errors) {
	if s.Total < 0 {
		errs.add(join(p, "total"), "must not be negative")
	}
	if _, err := CronParser.Parse(s.Schedule); err != nil {
		errs.add(join(p, "schedule"), "invalid cron schedule %q: %v", s.Schedule, err)
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
}

func (i *ImageAlert) setDefaults() {
	i.Enable = true
	i.MaxBytes = 50 << 30
	i.MaxPercent = 50
	i.GrowthBytes = 5 << 30
	i.Cooldown = D(time.Hour)
	i.MsgTitle = "Node image storage"
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
}

func itoa(i int) string { return strconv.Itoa(i) }

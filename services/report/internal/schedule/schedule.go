// Package schedule turns the sendReport schedule into tick times that are
// identical on every replica.
//
// The report's id is report/restarts/<tick>, and JetStream drops a second
// message with the same id: that is what makes "one report per tick" hold
// across replicas and leadership changes. It only works if every replica
// computes the same tick, so the tick is always the *scheduled* time, never
// the moment a timer fired, and `@every` intervals are aligned to a fixed
// grid instead of to the process start (robfig/cron counts them from the
// moment it was started, which differs per replica).
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/opswire/opswire/shared/config"
)

// maxCatchUpSteps bounds the walk over past ticks in Latest, so a schedule
// of every second and a long window cannot spin.
const maxCatchUpSteps = 100000

// Schedule is a parsed cron schedule in a fixed time zone.
type Schedule struct {
	spec  string
	sched cron.Schedule
	loc   *time.Location
}

// Location resolves the time zone of the schedule: the configured timezone,
// else $TZ (the seed's Deployment set TZ=Asia/Shanghai), else UTC.
func Location(timezone string, getenv func(string) string) (*time.Location, error) {
	name, from := timezone, "sendReport.timezone"
	if name == "" {
		name, from = strings.TrimPrefix(getenv("TZ"), ":"), "$TZ"
	}
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%s: unknown time zone %q", from, name)
	}
	return loc, nil
}

// Parse reads a schedule in the seed's 6-field form with seconds
// ("00 00 10 * * 1"), the usual 5-field form or a descriptor (@daily,
// @every 1h). A CRON_TZ= prefix in the spec wins over loc.
func Parse(spec string, loc *time.Location) (*Schedule, error) {
	sched, err := config.CronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	if s, ok := sched.(*cron.SpecSchedule); ok && !hasTZPrefix(spec) {
		// The parser defaults to the process's local zone; make it explicit.
		s.Location = loc
	}
	return &Schedule{spec: spec, sched: sched, loc: loc}, nil
}

func hasTZPrefix(spec string) bool {
	s := strings.TrimSpace(spec)
	return strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=")
}

// String returns the spec as written.
func (s *Schedule) String() string { return s.spec }

// Location is the zone ticks are computed in.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next returns the first tick strictly after t. For `@every d` ticks fall on
// multiples of d counted from Go's zero time (UTC), so "@every 1h" ticks on
// the hour on every replica.
func (s *Schedule) Next(t time.Time) time.Time {
	if c, ok := s.sched.(cron.ConstantDelaySchedule); ok {
		return t.Truncate(c.Delay).Add(c.Delay)
	}
	return s.sched.Next(t)
}

// Latest returns the last tick in (after, now], if any.
func (s *Schedule) Latest(after, now time.Time) (time.Time, bool) {
	var last time.Time
	found := false
	for t, i := s.Next(after), 0; !t.IsZero() && !t.After(now) && i < maxCatchUpSteps; t, i = s.Next(t), i+1 {
		last, found = t, true
	}
	return last, found
}

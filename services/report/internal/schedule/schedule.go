// Package schedule turns the sendReport schedule into tick times that are
// identical on every replica.
//
// The report's id is report/<cluster>/restarts/<tick>, and JetStream drops a second
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
// @every 1h). A CRON_TZ= prefix in the spec wins over loc, and is then the
// zone Location reports.
func Parse(spec string, loc *time.Location) (*Schedule, error) {
	sched, err := config.CronParser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	if _, ok := sched.(cron.ConstantDelaySchedule); ok {
		loc = time.UTC // @every ticks on a UTC grid whatever the zone
	}
	if s, ok := sched.(*cron.SpecSchedule); ok {
		if hasTZPrefix(spec) {
			loc = s.Location
		}
		// Ticks are computed on the wall clock of loc (see Next): the cron
		// library itself only ever sees UTC, which has no daylight saving.
		s.Location = time.UTC
	}
	return &Schedule{spec: spec, sched: sched, loc: loc}, nil
}

// String returns the spec as written.
func (s *Schedule) String() string { return s.spec }

// Location is the zone ticks are computed in.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next returns the first tick strictly after t. For `@every d` ticks fall on
// multiples of d counted from Go's zero time (UTC), so "@every 1h" ticks on
// the hour on every replica.
//
// A cron line gives one tick per matching local wall-clock time (the
// intended tick), also across daylight-saving changes. robfig/cron applied to
// the zone directly fires twice in the repeated hour of autumn (01:30 EDT
// and 01:30 EST) and never in the skipped hour of spring (no 02:30 that
// day). Here the cron line is matched against the wall clock, and each
// matching wall time becomes one instant: a repeated time its first
// occurrence, a skipped time the same distance past the change (02:30 on a
// spring-forward night ticks at 03:30, summer time).
func (s *Schedule) Next(t time.Time) time.Time {
	if c, ok := s.sched.(cron.ConstantDelaySchedule); ok {
		return t.Truncate(c.Delay).Add(c.Delay)
	}
	if _, ok := s.sched.(*cron.SpecSchedule); !ok {
		return s.sched.Next(t)
	}
	wall := wallClock(t, s.loc)
	// A few wall ticks can map to instants at or before t: those of the
	// repeated hour already fired in its first occurrence.
	for i := 0; i < 8; i++ {
		wall = s.sched.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		if at := instant(wall, s.loc); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// wallClock is t's wall-clock time in loc, written as a UTC time.
func wallClock(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instant is the first instant whose wall clock in loc is wall; for a wall
// time that does not exist (skipped by a change to summer time), the instant
// as far past the change as wall is past its start.
func instant(wall time.Time, loc *time.Location) time.Time {
	at := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), wall.Nanosecond(), loc)
	// Offsets change by at most a few hours: an earlier instant with the same
	// wall clock is the first occurrence of a repeated time.
	for _, back := range []time.Duration{3 * time.Hour, 2 * time.Hour, 90 * time.Minute, time.Hour, 30 * time.Minute} {
		if c := at.Add(-back); wallClock(c, loc).Equal(wall) {
			return c
		}
	}
	if got := wallClock(at, loc); !got.Equal(wall) {
		// wall does not exist; time.Date may have read it with the offset
		// before the change, an instant before it. Move past the change by
		// the difference: 02:30 on a spring-forward night becomes 03:30.
		if d := wall.Sub(got); d > 0 {
			at = at.Add(d)
		}
	}
	return at
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

func hasTZPrefix(spec string) bool {
	s := strings.TrimSpace(spec)
	return strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=")
}

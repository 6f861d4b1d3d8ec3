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

// maxOffsetChange bounds how far a zone's UTC offset moves at one change
// (daylight saving moves it by 1 h, a few zones by 2 h or 30 min). A wall
// tick further than this past t's wall clock is an instant after t.
const maxOffsetChange = 3 * time.Hour

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
	// In the second occurrence of a repeated hour, every wall tick up to
	// the end of that hour maps to its first occurrence, at or before t
	// (already fired): skip them. How many depends on the schedule (*/5
	// has 11), so the walk is bounded by wall-clock distance, not a count.
	limit := wall.Add(maxOffsetChange)
	for {
		wall = s.sched.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		if at := instant(wall, s.loc); at.After(t) || wall.After(limit) {
			return at
		}
	}
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

// Latest returns the last tick in (after, now], if any. It walks the ticks
// of a window ending at now, widened 16-fold until it holds one or reaches
// after, so the walk is as long as the ticks of that window, whatever the
// window (a schedule of every second over a catch-up of days stays short),
// and always ends at the latest tick, not after a fixed number of steps.
func (s *Schedule) Latest(after, now time.Time) (time.Time, bool) {
	span := now.Sub(after) // saturates: back*16 below cannot overflow
	for back := time.Minute; back < span; back *= 16 {
		if last, ok := s.lastIn(now.Add(-back), now); ok {
			return last, true
		}
		if back > span/16 {
			break
		}
	}
	return s.lastIn(after, now)
}

// lastIn walks the ticks in (from, now] and returns the last.
func (s *Schedule) lastIn(from, now time.Time) (time.Time, bool) {
	var last time.Time
	found := false
	for t := s.Next(from); !t.IsZero() && !t.After(now); t = s.Next(t) {
		last, found = t, true
	}
	return last, found
}

func hasTZPrefix(spec string) bool {
	s := strings.TrimSpace(spec)
	return strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=")
}

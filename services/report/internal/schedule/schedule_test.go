package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestNextAllForms(t *testing.T) {
	shanghai := mustLoc(t, "Asia/Shanghai")
	newYork := mustLoc(t, "America/New_York")
	// Wednesday 2025-01-01 10:17:05.3 UTC.
	after := time.Date(2025, 1, 1, 10, 17, 5, 300_000_000, time.UTC)
	tests := []struct {
		name string
		spec string
		loc  *time.Location
		want time.Time
	}{
		{"seed 6-field with seconds, Shanghai", "00 00 10 * * 1", shanghai, time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)},
		{"seed 6-field with seconds, UTC", "00 00 10 * * 1", time.UTC, time.Date(2025, 1, 6, 10, 0, 0, 0, time.UTC)},
		{"5-field", "30 9 * * *", time.UTC, time.Date(2025, 1, 2, 9, 30, 0, 0, time.UTC)},
		{"5-field, New York", "30 9 * * *", newYork, time.Date(2025, 1, 1, 14, 30, 0, 0, time.UTC)},
		{"6-field every 3 seconds", "*/3 * * * * *", time.UTC, time.Date(2025, 1, 1, 10, 17, 6, 0, time.UTC)},
		{"@daily in Shanghai is local midnight", "@daily", shanghai, time.Date(2025, 1, 1, 16, 0, 0, 0, time.UTC)},
		{"@weekly", "@weekly", time.UTC, time.Date(2025, 1, 5, 0, 0, 0, 0, time.UTC)},
		{"@every 1h aligned to the hour", "@every 1h", shanghai, time.Date(2025, 1, 1, 11, 0, 0, 0, time.UTC)},
		{"@every 5s aligned", "@every 5s", time.UTC, time.Date(2025, 1, 1, 10, 17, 10, 0, time.UTC)},
		{"CRON_TZ prefix wins over the zone", "CRON_TZ=Asia/Shanghai 0 0 10 * * *", time.UTC, time.Date(2025, 1, 2, 2, 0, 0, 0, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.spec, tc.loc)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Next(after); !got.Equal(tc.want) {
				t.Fatalf("Next(%s) = %s, want %s", after, got.UTC(), tc.want)
			}
		})
	}
}

// Two replicas started at different moments must agree on every tick.
func TestTicksDoNotDependOnStartTime(t *testing.T) {
	for _, spec := range []string{"@every 7s", "*/4 * * * * *", "@every 1m30s"} {
		s, err := Parse(spec, time.UTC)
		if err != nil {
			t.Fatal(err)
		}
		base := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
		a, b := s.Next(base.Add(1100*time.Millisecond)), s.Next(base.Add(2900*time.Millisecond))
		for i := 0; i < 50; i++ {
			if a.Before(b) {
				a = s.Next(a)
				continue
			}
			if b.Before(a) {
				b = s.Next(b)
				continue
			}
			break
		}
		if !a.Equal(b) {
			t.Fatalf("%s: replicas never agree on a tick (%s vs %s)", spec, a, b)
		}
		if a.Nanosecond() != 0 {
			t.Fatalf("%s: tick %s has a fraction of a second", spec, a)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, spec := range []string{"every monday", "61 * * * *", "@sometimes", ""} {
		if _, err := Parse(spec, time.UTC); err == nil || !strings.Contains(err.Error(), "schedule") {
			t.Errorf("Parse(%q) = %v, want a schedule error", spec, err)
		}
	}
}

func TestLocation(t *testing.T) {
	env := func(tz string) func(string) string {
		return func(k string) string {
			if k == "TZ" {
				return tz
			}
			return ""
		}
	}
	tests := []struct {
		name, timezone, tz, want, wantErr string
	}{
		{name: "config wins", timezone: "Europe/Berlin", tz: "Asia/Shanghai", want: "Europe/Berlin"},
		{name: "TZ when config empty", tz: "Asia/Shanghai", want: "Asia/Shanghai"},
		{name: "TZ with leading colon", tz: ":Asia/Tokyo", want: "Asia/Tokyo"},
		{name: "UTC by default", want: "UTC"},
		{name: "bad TZ names the variable", tz: "Mars/Olympus", wantErr: "$TZ"},
		{name: "bad config names the key", timezone: "Nowhere", wantErr: "sendReport.timezone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			loc, err := Location(tc.timezone, env(tc.tz))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if loc.String() != tc.want {
				t.Fatalf("location %s, want %s", loc, tc.want)
			}
		})
	}
}

func TestLatest(t *testing.T) {
	s, err := Parse("0 0 10 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	day := func(d, h, m int) time.Time { return time.Date(2025, 1, d, h, m, 0, 0, time.UTC) }
	tests := []struct {
		name       string
		after, now time.Time
		want       time.Time
		found      bool
	}{
		{"tick just missed", day(2, 9, 50), day(2, 10, 5), day(2, 10, 0), true},
		{"tick already sent", day(2, 10, 0), day(2, 10, 5), time.Time{}, false},
		{"several missed: the last", day(1, 9, 0), day(3, 11, 0), day(3, 10, 0), true},
		{"none yet", day(2, 10, 1), day(3, 9, 59), time.Time{}, false},
		{"tick exactly now", day(2, 9, 0), day(2, 10, 0), day(2, 10, 0), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found := s.Latest(tc.after, tc.now)
			if found != tc.found || !got.Equal(tc.want) {
				t.Fatalf("Latest = %s,%v want %s,%v", got, found, tc.want, tc.found)
			}
		})
	}
}

// TestLatestOverALongWindowOfAFrequentSchedule: the walk is not cut short
// by a step count: a schedule of every second over three days still gives
// the last tick, not one a hundred thousand ticks after the start.
func TestLatestOverALongWindowOfAFrequentSchedule(t *testing.T) {
	s, err := Parse("@every 1s", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 1, 4, 10, 0, 0, 500e6, time.UTC)
	if got, ok := s.Latest(now.Add(-72*time.Hour), now); !ok || !got.Equal(now.Truncate(time.Second)) {
		t.Fatalf("Latest over 72 h of @every 1s = %v,%v, want %v", got, ok, now.Truncate(time.Second))
	}
}

// TestNextFromSecondOccurrenceOfRepeatedHour: a replica that asks for the
// next tick while the clock is in the second occurrence of the repeated
// autumn hour (a leader starting then, or a tick retried into it) gets the
// next tick, however many wall ticks of that hour fired in its first
// occurrence: a zero time ("never fires again") would stop runSchedule for
// the rest of the leader's term.
func TestNextFromSecondOccurrenceOfRepeatedHour(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	s, err := Parse("*/5 * * * *", ny)
	if err != nil {
		t.Fatal(err)
	}
	inSecond := time.Date(2025, 11, 2, 6, 10, 0, 0, time.UTC) // 01:10 EST; 01:15..01:55 fired as EDT
	want := time.Date(2025, 11, 2, 7, 0, 0, 0, time.UTC)      // 02:00 EST
	if got := s.Next(inSecond); !got.Equal(want) {
		t.Fatalf("Next(01:10 EST) with */5 = %v, want %v (02:00 EST)", got, want)
	}
	// Latest over a window that starts in the repeated hour walks past it.
	if got, ok := s.Latest(inSecond, time.Date(2025, 11, 2, 7, 7, 0, 0, time.UTC)); !ok || !got.Equal(time.Date(2025, 11, 2, 7, 5, 0, 0, time.UTC)) {
		t.Fatalf("Latest from 01:10 EST to 02:07 EST = %v,%v, want 02:05 EST", got, ok)
	}
}

// TestDaylightSaving: one tick per intended local time across both changes
// of America/New_York in 2025 (March 9 skips 02:00–03:00, November 2 repeats
// 01:00–02:00). robfig/cron alone fires twice at 01:30 in November and
// never at 02:30 in March.
func TestDaylightSaving(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	ticks := func(spec string, from, to time.Time) []time.Time {
		s, err := Parse(spec, ny)
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Time
		for at := s.Next(from); !at.IsZero() && at.Before(to); at = s.Next(at) {
			out = append(out, at)
		}
		return out
	}
	day := func(m time.Month, d int) (time.Time, time.Time) {
		return time.Date(2025, m, d, 0, 0, 0, 0, ny), time.Date(2025, m, d, 23, 59, 0, 0, ny)
	}

	from, to := day(time.November, 2)
	got := ticks("30 1 * * *", from, to)
	if len(got) != 1 || !got[0].Equal(time.Date(2025, 11, 2, 5, 30, 0, 0, time.UTC)) {
		t.Fatalf("repeated hour: ticks %v, want once at 01:30 EDT (05:30Z)", got)
	}
	from, to = day(time.March, 9)
	got = ticks("30 2 * * *", from, to)
	if len(got) != 1 || !got[0].Equal(time.Date(2025, 3, 9, 7, 30, 0, 0, time.UTC)) {
		t.Fatalf("skipped hour: ticks %v, want once at 03:30 EDT (07:30Z)", got)
	}
	// Hourly on the day of the repeat: one tick per wall hour (23 wall hours
	// from 01:00 to 23:00), none in the second 01:xx.
	from, to = day(time.November, 2)
	got = ticks("0 * * * *", from.Add(time.Second), to)
	if len(got) != 23 {
		t.Fatalf("hourly on the repeat day: %d ticks %v, want 23", len(got), got)
	}
	seen := map[string]bool{}
	for _, at := range got {
		wall := at.In(ny).Format("15:04")
		if seen[wall] {
			t.Fatalf("local time %s ticked twice", wall)
		}
		seen[wall] = true
	}
	// Replicas agree wherever they start, also inside the repeated hour.
	s, _ := Parse("30 1 * * *", ny)
	inSecond := time.Date(2025, 11, 2, 6, 10, 0, 0, time.UTC) // 01:10 EST, after 01:30 EDT fired
	if next := s.Next(inSecond); !next.Equal(time.Date(2025, 11, 3, 6, 30, 0, 0, time.UTC)) {
		t.Fatalf("Next from the second 01:10 = %s, want the next day's 01:30 EST", next)
	}
}

// TestLocationFollowsCRONTZ: the zone logged is the one the schedule uses.
func TestLocationFollowsCRONTZ(t *testing.T) {
	s, err := Parse("CRON_TZ=Asia/Shanghai 0 0 10 * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Location().String(); got != "Asia/Shanghai" {
		t.Fatalf("Location() = %s, want Asia/Shanghai (the CRON_TZ prefix)", got)
	}
	if s, _ := Parse("0 0 10 * * *", mustLoc(t, "Europe/Berlin")); s.Location().String() != "Europe/Berlin" {
		t.Fatalf("Location() = %s, want Europe/Berlin", s.Location())
	}
	if s, _ := Parse("@every 1h", mustLoc(t, "Europe/Berlin")); s.Location() != time.UTC {
		t.Fatalf("@every: Location() = %s, want UTC (its grid)", s.Location())
	}
}

// TestHourlyTicksPerLocalDay: an hourly cron line ticks once per local
// hour of the day: 24 on the day the clock goes back (the repeated hour
// ticks once), 23 on the day it goes forward (the skipped hour has no
// ticks of its own), as docs/report.md says.
func TestHourlyTicksPerLocalDay(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	s, err := Parse("0 * * * *", ny)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		day  time.Time
		want int
	}{
		{"an ordinary day", time.Date(2025, 1, 15, 0, 0, 0, 0, ny), 24},
		{"the clock goes back (25 hours long)", time.Date(2025, 11, 2, 0, 0, 0, 0, ny), 24},
		{"the clock goes forward (23 hours long)", time.Date(2025, 3, 9, 0, 0, 0, 0, ny), 23},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			end := tc.day.AddDate(0, 0, 1)
			n := 0
			for at := s.Next(tc.day.Add(-time.Second)); at.Before(end); at = s.Next(at) {
				n++
			}
			if n != tc.want {
				t.Fatalf("%d hourly ticks on %s, want %d", n, tc.day.Format(time.DateOnly), tc.want)
			}
		})
	}
}

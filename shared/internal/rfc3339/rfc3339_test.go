package rfc3339

import (
	"testing"
	"time"
)

// TestParseUTC: what ParseUTC reads it reads exactly as time.Parse does
// (the same value, ==, location and all), and it declines the rest.
func TestParseUTC(t *testing.T) {
	for _, tc := range []struct {
		in   string
		fast bool
	}{
		{"2026-12-03T08:31:43Z", true},
		{"2026-12-03T08:31:43.1Z", true},
		{"2026-12-03T08:31:43.123456789Z", true},
		{"2024-02-29T23:59:59.000000001Z", true},
		{"0001-01-01T00:00:00Z", true},
		{"9999-12-31T23:59:59.999999999Z", true},
		{"2000-03-01T00:00:00Z", true},
		{"1900-02-28T12:00:00Z", true},
		{"2026-12-03T08:31:43.1234567891Z", false}, // ten digits: time.Parse truncates
		{"2023-02-29T00:00:00Z", false},
		{"2026-13-01T00:00:00Z", false},
		{"2026-12-03T24:00:00Z", false},
		{"2026-12-03T08:60:00Z", false},
		{"2026-12-03T08:31:60Z", false},
		{"2026-12-03T08:31:43+01:00", false},
		{"2026-12-03t08:31:43Z", false},
		{"2026-12-03T08:31:43.Z", false},
		{"2026-12-03T08:31:4xZ", false},
		{"0000-01-01T00:00:00Z", false},
		{"2026-12-03T08:31:43", false},
		{"", false},
	} {
		got, ok := ParseUTC(tc.in)
		if ok != tc.fast {
			t.Errorf("%q: fast path %v, want %v", tc.in, ok, tc.fast)
		}
		gotB, okB := ParseUTC([]byte(tc.in))
		if okB != ok || gotB != got {
			t.Errorf("%q: []byte gives %v %v, string %v %v", tc.in, gotB, okB, got, ok)
		}
		if !ok {
			continue
		}
		want, err := time.Parse(time.RFC3339Nano, tc.in)
		if err != nil || got != want {
			t.Errorf("%q: ParseUTC = %#v, time.Parse = %#v (%v)", tc.in, got, want, err)
		}
	}
}

// FuzzParseUTC: on any input ParseUTC either declines or agrees with
// time.Parse exactly.
func FuzzParseUTC(f *testing.F) {
	f.Add("2026-12-03T08:31:43.123456789Z")
	f.Add("2024-02-29T23:59:59Z")
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseUTC(s)
		if !ok {
			return
		}
		want, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || got != want {
			t.Fatalf("%q: ParseUTC = %#v, time.Parse = %#v (%v)", s, got, want, err)
		}
	})
}

package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/opswire/opswire/test/bench
cpu: AMD EPYC
BenchmarkMirrorRebuild150k-2   	       1	14173799909 ns/op	      1290 floor-ms	      3684 mirror-ms	         2.855 x-floor
--- BENCH: BenchmarkMirrorRebuild150k-2
    rebuild_test.go:78: rounds: mirror [3.6s], floor [1.1s]
BenchmarkBuildReport150k-2   	      10	 120000000 ns/op	 5242880 B/op	   1600 allocs/op
BenchmarkFloorScan150k-2   	     100	   2000000 ns/op	       0 B/op	      0 allocs/op
--- FAIL: BenchmarkNotifierBurst10k
    notifier_test.go:90: timed out
PASS
`

func TestParse(t *testing.T) {
	res := Parse(strings.NewReader(sample))
	tests := []struct {
		bench, unit string
		want        float64
	}{
		{"BenchmarkMirrorRebuild150k", "mirror-ms", 3684},
		{"BenchmarkMirrorRebuild150k", "x-floor", 2.855},
		{"BenchmarkBuildReport150k", "ns/op", 120000000},
		{"BenchmarkBuildReport150k", "B/op", 5242880},
		{"BenchmarkFloorScan150k", "ns/op", 2000000},
	}
	for _, tt := range tests {
		if got, ok := res.Get(tt.bench, tt.unit); !ok || got != tt.want {
			t.Errorf("%s %s = %v (%v), want %v", tt.bench, tt.unit, got, ok, tt.want)
		}
	}
	if res.CPU != "AMD EPYC" {
		t.Errorf("cpu %q", res.CPU)
	}
	if len(res.Logs) != 1 || !strings.HasPrefix(res.Logs[0], "BenchmarkMirrorRebuild150k: rounds") {
		t.Errorf("logs %q", res.Logs)
	}
	if len(res.Failures) != 1 || res.Failures[0] != "BenchmarkNotifierBurst10k: timed out" {
		t.Errorf("failures %q", res.Failures)
	}
}

func TestRows(t *testing.T) {
	rows := Rows(Parse(strings.NewReader(sample)))
	find := func(prefix string) Row {
		for _, r := range rows {
			if strings.HasPrefix(r.Figure, prefix) {
				return r
			}
		}
		t.Fatalf("no row %q", prefix)
		return Row{}
	}
	tests := []struct {
		prefix              string
		value, floor, ratio string
		verdict             Verdict
	}{
		{"3 Actor rebuild", "3,684 ms", "1,290 ms", "2.86×", Missed},
		{"5 Report: build over 150k pods (total", "120.0 ms", "2.0 ms", "60.00×", Met},
		{"5 Report: allocated", "5.0 MiB", "—", "—", NoTarget},
		{"6 Notifier: rate-limit", "not measured", "—", "—", NotMeasured},
		{"1 Reaction: node crosses maxPods → cordoned, p50 (?", "not measured", "—", "—", NoTarget},
	}
	if r := find("6 Notifier: 10,000-event burst"); r.Target != "—" || r.Value != "not measured" {
		t.Errorf("unmeasured row without a target: %+v", r)
	}
	for _, tt := range tests {
		r := find(tt.prefix)
		if r.Value != tt.value || r.Floor != tt.floor || r.Ratio != tt.ratio || r.Verdict != tt.verdict {
			t.Errorf("%s: got %+v, want value %q floor %q ratio %q verdict %v", tt.prefix, r, tt.value, tt.floor, tt.ratio, tt.verdict)
		}
	}
}

func TestThousands(t *testing.T) {
	tests := map[float64]string{0: "0", 999: "999", 1000: "1,000", 150000: "150,000", 1234567.6: "1,234,568", -2500: "-2,500"}
	for in, want := range tests {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%v) = %q, want %q", in, got, want)
		}
	}
}

// TestCordonRequestsRow: the cordon's API cost is judged on its measured
// value, never rounded: a value above 4 misses and prints above 4; the
// re-looks are rows of their own.
func TestCordonRequestsRow(t *testing.T) {
	for _, tc := range []struct {
		raw, value string
		verdict    Verdict
	}{
		{"4", "4.00", Met},
		{"3.9975", "3.9975", Met}, // a missing Event shows
		{"4.0025", "4.0025", Missed},
		{"4.005", "4.005", Missed}, // prints 4.00 at two decimals
		{"4.00001", "4.00001", Missed},
		{"4.497", "4.497", Missed},
		{"4.5", "4.50", Missed},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			in := "BenchmarkReaction5000-2   	       1	32366096065 ns/op	" + tc.raw + " cordon-req/action	3 cordon-relooks	6 cordon-relook-req\n"
			rows := map[string]Row{}
			for _, r := range Rows(Parse(strings.NewReader(in))) {
				for _, prefix := range []string{"4 API requests per cordon action", "4 Cordon re-looks", "4 API requests of the cordon re-looks"} {
					if strings.HasPrefix(r.Figure, prefix) {
						rows[prefix] = r
					}
				}
			}
			row := rows["4 API requests per cordon action"]
			if row.Value != tc.value || row.Verdict != tc.verdict || row.Target != "≤ 4 requests per action" {
				t.Errorf("row %+v, want value %s, verdict %v", row, tc.value, tc.verdict)
			}
			if r := rows["4 Cordon re-looks"]; r.Value != "3" || r.Verdict != NoTarget {
				t.Errorf("re-looks row %+v, want 3 and no target", r)
			}
			if r := rows["4 API requests of the cordon re-looks"]; r.Value != "6" || r.Verdict != NoTarget {
				t.Errorf("re-look requests row %+v, want 6 and no target", r)
			}
		})
	}
}

// TestCleanupAPIRows: cleanup's by-design LIST (the recovery's read of its
// own Events, once per leadership term) is judged against the terms, and
// every other LIST or WATCH against 0; its requests per deletion are judged
// unrounded.
func TestCleanupAPIRows(t *testing.T) {
	const other, lists, perAction = "4 LIST + WATCH by opswire-cleanup beyond", "4 Events LISTs by opswire-cleanup's recovery", "4 API requests per cleanup action"
	for _, tc := range []struct {
		name, metrics                   string
		other, lists, perAction         Verdict
		listsValue, listsFloor, reqText string
	}{
		{"as designed", "3 cleanup-req/action	0 cleanup-other-list+watch	1 cleanup-events-lists	1 cleanup-terms", Met, Met, Met, "1", "1", "3.00"},
		{"two terms", "3 cleanup-req/action	0 cleanup-other-list+watch	2 cleanup-events-lists	2 cleanup-terms", Met, Met, Met, "2", "2", "3.00"},
		{"a recovery LISTed twice, a pod WATCH", "3.004 cleanup-req/action	1 cleanup-other-list+watch	2 cleanup-events-lists	1 cleanup-terms",
			Missed, Missed, Missed, "2", "1", "3.004"},
		{"terms unknown", "3 cleanup-req/action	0 cleanup-other-list+watch	1 cleanup-events-lists", Met, NotMeasured, Met, "1", "not measured", "3.00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := map[string]Row{}
			for _, r := range Rows(Parse(strings.NewReader("BenchmarkReaction5000-2   	       1	32366096065 ns/op	" + tc.metrics + "\n"))) {
				for _, prefix := range []string{other, lists, perAction} {
					if strings.HasPrefix(r.Figure, prefix) {
						rows[prefix] = r
					}
				}
			}
			if r := rows[other]; r.Verdict != tc.other {
				t.Errorf("other LIST+WATCH row %+v, want %v", r, tc.other)
			}
			if r := rows[lists]; r.Verdict != tc.lists || r.Value != tc.listsValue || r.Floor != tc.listsFloor {
				t.Errorf("Events LIST row %+v, want %v, value %s, floor %s", r, tc.lists, tc.listsValue, tc.listsFloor)
			}
			if r := rows[perAction]; r.Verdict != tc.perAction || r.Value != tc.reqText {
				t.Errorf("per-action row %+v, want %v, %s", r, tc.perAction, tc.reqText)
			}
		})
	}
}

// TestReactionRowsUseTheirTriggersFloor: each reaction row is judged against
// the informer seeing its own trigger, for the same samples: a cordon's is a
// pod's creation, a cleanup's a status write, an uncordon's a deletion (not the
// pool of creations and status writes, which mixed cleanup's faster trigger
// into cordon's floor and cordon's slower one into cleanup's).
func TestReactionRowsUseTheirTriggersFloor(t *testing.T) {
	metrics := "25 cordon-p99-ms	20 cleanup-p99-ms	30 uncordon-p99-ms	8 floor-p99-ms	10 floor-create-p99-ms	5 floor-status-p99-ms	12 floor-delete-p99-ms	9 cordon-in-p99-ms"
	want := map[string]struct {
		floor, ratio string
		verdict      Verdict
	}{
		"1 Reaction: node crosses maxPods → cordoned, p99":      {"10.0 ms", "2.50×", Met},
		"1 Reaction: evicted pod → deleted, p99":                {"5.0 ms", "4.00×", Met},
		"1 Reaction: node back at minPods → uncordoned, p99":    {"12.0 ms", "2.50×", Met},
		"1 Reaction, cordon's steps: trigger → the actuator st": {"10.0 ms", "—", NoTarget},
	}
	seen := 0
	for _, r := range Rows(Parse(strings.NewReader("BenchmarkReaction5000-2   	       1	32366096065 ns/op	" + metrics + "\n"))) {
		for prefix, w := range want {
			if !strings.HasPrefix(r.Figure, prefix) {
				continue
			}
			seen++
			if r.Floor != w.floor || r.Verdict != w.verdict || (w.ratio != "—" && r.Ratio != w.ratio) {
				t.Errorf("%s: floor %s ratio %s verdict %v, want floor %s ratio %s verdict %v", r.Figure, r.Floor, r.Ratio, r.Verdict, w.floor, w.ratio, w.verdict)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("matched %d rows, want %d", seen, len(want))
	}
}

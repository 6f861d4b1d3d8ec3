package actuate

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWriteMetricsKeepTheActorsPreviousNames: an actor counts in the
// shared family, and its previous metric names show the same counts (with
// its previous how values) for one release.
func TestWriteMetricsKeepTheActorsPreviousNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewWriteMetrics(reg, "cleanup", WriteMetricsLegacy{
		InDoubt:     "opswire_cleanup_writes_in_doubt_total",
		InDoubtHow:  map[string]string{DoubtApplied: "happened", DoubtNotApplied: "not_happened"},
		RateLimited: "opswire_cleanup_rate_limited_total",
	})
	m.InDoubt.WithLabelValues(DoubtUnanswered).Add(2)
	m.InDoubt.WithLabelValues(DoubtApplied).Inc()
	m.RateLimited.Add(3)
	want := `
# HELP opswire_actuate_rate_limited_total Writes postponed by the actor's rate window (the object is requeued, never dropped).
# TYPE opswire_actuate_rate_limited_total counter
opswire_actuate_rate_limited_total{actor="cleanup"} 3
# HELP opswire_cleanup_rate_limited_total Deprecated: opswire_actuate_rate_limited_total{actor="cleanup"}.
# TYPE opswire_cleanup_rate_limited_total counter
opswire_cleanup_rate_limited_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "opswire_actuate_rate_limited_total", "opswire_cleanup_rate_limited_total"); err != nil {
		t.Error(err)
	}
	for _, tc := range []struct {
		name, how string
		want      float64
	}{
		{"opswire_actuate_writes_in_doubt_total", DoubtUnanswered, 2},
		{"opswire_actuate_writes_in_doubt_total", DoubtApplied, 1},
		{"opswire_cleanup_writes_in_doubt_total", DoubtUnanswered, 2},
		{"opswire_cleanup_writes_in_doubt_total", "happened", 1},
		{"opswire_cleanup_writes_in_doubt_total", "not_happened", 0},
	} {
		if got := gathered(t, reg, tc.name, tc.how); got != tc.want {
			t.Errorf("%s{how=%q} = %v, want %v", tc.name, tc.how, got, tc.want)
		}
	}
}

func gathered(t *testing.T, reg *prometheus.Registry, name, how string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "how" && l.GetValue() == how {
					return m.Counter.GetValue()
				}
			}
		}
	}
	return -1
}

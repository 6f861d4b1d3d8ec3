package actuate

import (
	"testing"
	"time"

	"github.com/opswire/opswire/shared/events"
)

// TestLatestAttempts: the recovery checks the latest attempt of each
// outcome id, and takes it for answered (none of its writes can commit)
// only when every attempt of the id has its answer record: a retry's answer
// says nothing of an earlier attempt whose write may have committed (found
// by review: a retry's 404 hid the removal an earlier DELETE had begun).
func TestLatestAttempts(t *testing.T) {
	t1, t2 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2026, 1, 2, 3, 4, 9, 0, time.UTC)
	attempt := func(id string, at time.Time) StoredIntent {
		return StoredIntent{At: at, Intent: events.Intent{Time: at, Outcome: events.IntentOutcome{ID: id}}}
	}
	answer := func(id string, at time.Time, why string) StoredIntent {
		s := attempt(id, at)
		s.At, s.Intent.Answered = at.Add(time.Second), why
		return s
	}
	tests := []struct {
		name   string
		stored []StoredIntent
		want   map[string]string // outcome id → Answered of its latest attempt
		latest map[string]time.Time
	}{
		{"one attempt, answered", []StoredIntent{attempt("a", t1), answer("a", t1, "gone")},
			map[string]string{"a": "gone"}, map[string]time.Time{"a": t1}},
		{"one attempt, unanswered", []StoredIntent{attempt("a", t1)},
			map[string]string{"a": ""}, map[string]time.Time{"a": t1}},
		{"an earlier attempt unanswered", []StoredIntent{attempt("a", t1), attempt("a", t2), answer("a", t2, "gone")},
			map[string]string{"a": ""}, map[string]time.Time{"a": t2}},
		{"every attempt answered", []StoredIntent{attempt("a", t1), answer("a", t1, "throttled"), attempt("a", t2), answer("a", t2, "gone")},
			map[string]string{"a": "gone"}, map[string]time.Time{"a": t2}},
		{"the earlier answer stored after the retry's intent", []StoredIntent{attempt("a", t1), attempt("a", t2), answer("a", t1, "throttled"), answer("a", t2, "refused")},
			map[string]string{"a": "refused"}, map[string]time.Time{"a": t2}},
		{"the earlier attempt answered, the retry open", []StoredIntent{attempt("a", t1), attempt("a", t2), answer("a", t1, "throttled")},
			map[string]string{"a": ""}, map[string]time.Time{"a": t2}},
		{"an answer record alone is no intent", []StoredIntent{answer("a", t1, "gone"), attempt("b", t2)},
			map[string]string{"b": ""}, map[string]time.Time{"b": t2}},
		{"ids apart", []StoredIntent{attempt("a", t1), attempt("b", t1), answer("b", t1, "gone"), attempt("a", t2)},
			map[string]string{"a": "", "b": "gone"}, map[string]time.Time{"a": t2, "b": t1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := LatestAttempts(tc.stored)
			if len(got) != len(tc.want) {
				t.Fatalf("%d latest attempts %+v, want %d", len(got), got, len(tc.want))
			}
			for _, s := range got {
				id := s.Intent.Outcome.ID
				if want, ok := tc.want[id]; !ok || s.Intent.Answered != want || !s.Intent.Time.Equal(tc.latest[id]) {
					t.Errorf("%s: latest attempt at %v answered %q; want at %v, answered %q", id, s.Intent.Time, s.Intent.Answered, tc.latest[id], want)
				}
			}
		})
	}
}

// TestRecoveryReadSpan: the recovery reads back at least the rate window
// and the late-commit horizon (plus the clock skew it allows): with a long
// kube.serverRequestTimeout the horizon passes DefaultRecoverySpan, and an
// intent older than the span read could still commit unseen.
func TestRecoveryReadSpan(t *testing.T) {
	tests := []struct {
		name string
		r    Recovery
		per  time.Duration
		want time.Duration
	}{
		{"default", Recovery{}, time.Minute, DefaultRecoverySpan},
		{"a longer window", Recovery{}, time.Hour, time.Hour},
		{"a set span", Recovery{Span: 20 * time.Minute}, time.Minute, 20 * time.Minute},
		{"the default horizon fits", Recovery{LateCommit: 90 * time.Second}, time.Minute, DefaultRecoverySpan},
		{"a horizon past the span", Recovery{LateCommit: 10*time.Minute + 30*time.Second}, time.Minute, 10*time.Minute + 30*time.Second + liveSkew},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.ReadSpan(tc.per); got != tc.want {
				t.Fatalf("ReadSpan(%v) = %v, want %v", tc.per, got, tc.want)
			}
		})
	}
}

package actor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/report/internal/store"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// wallClock is a test clock: the given wall clock, real timers.
type wallClock func() time.Time

func (c wallClock) Now() time.Time                       { return c() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func kvStore(t *testing.T, e *env) *store.Store {
	t.Helper()
	kv, err := store.Open(e.ctx, e.js, config.Default().NATS.Replicas)
	if err != nil {
		t.Fatal(err)
	}
	return store.New(kv, e.cluster)
}

func TestFitPayload(t *testing.T) {
	rows := func(n int) []events.RestartRow {
		out := make([]events.RestartRow, n)
		for i := range out {
			out[i] = events.RestartRow{Namespace: "ns", Pod: fmt.Sprintf("pod-%05d", i), Restarts: int64(1000 - i)}
		}
		return out
	}
	tests := []struct {
		name      string
		rows      int
		limit     int
		wantCut   bool
		wantError bool
	}{
		{name: "fits", rows: 10, limit: 64 << 10},
		{name: "too many rows are cut", rows: 5000, limit: 16 << 10, wantCut: true},
		{name: "not even the summary fits", rows: 1, limit: 50, wantError: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := events.RestartReport{ID: "x", Offenders: tc.rows, Rows: rows(tc.rows)}
			data, err := fitPayload(&rep, tc.limit)
			if tc.wantError {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > tc.limit {
				t.Fatalf("%d bytes over the limit %d", len(data), tc.limit)
			}
			if cut := rep.Truncated > 0; cut != tc.wantCut || len(rep.Rows)+rep.Truncated != tc.rows {
				t.Fatalf("rows %d truncated %d of %d", len(rep.Rows), rep.Truncated, tc.rows)
			}
			if tc.wantCut && rep.Rows[0].Restarts != 1000 {
				t.Fatal("the worst rows must be kept")
			}
		})
	}
}

func TestNewRejectsAnUnknownTZ(t *testing.T) {
	_, err := New(Deps{Config: config.Default(), Cluster: "c", Getenv: func(k string) string {
		if k == "TZ" {
			return "Mars/Olympus"
		}
		return ""
	}})
	if err == nil || !strings.Contains(err.Error(), "$TZ") {
		t.Fatalf("err = %v, want one naming $TZ", err)
	}
}

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/pause"
)

type memRecords map[string]pause.Record

func (m memRecords) Pause(_ context.Context, a string, r pause.Record) error { m[a] = r; return nil }
func (m memRecords) Resume(_ context.Context, a string) error                { delete(m, a); return nil }
func (m memRecords) Get(_ context.Context, a string) (pause.Record, bool, error) {
	r, ok := m[a]
	return r, ok, nil
}

var now = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func run(t *testing.T, recs memRecords, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := Env{Stdout: &out, Stderr: &errOut, Now: func() time.Time { return now },
		Getenv: func(k string) string { return map[string]string{"USER": "sre", "OPSWIRE_CLUSTER": "prod"}[k] },
		Connect: func(_ context.Context, cfg Config) (Records, func(), error) {
			if cfg.Cluster != "prod" && cfg.Cluster != "other" {
				t.Fatalf("cluster %q", cfg.Cluster)
			}
			return recs, func() {}, nil
		}}
	code := Main(context.Background(), args, env)
	return code, out.String(), errOut.String()
}

func TestUsageErrorsNameTheBadArgument(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"pause"}, "want one ACTOR"},
		{[]string{"pause", "watcher"}, "want one ACTOR"},
		{[]string{"pause", "cordon", "cleanup"}, "want one ACTOR"},
		{[]string{"pause", "cordon", "--for", "-1m"}, "--for -1m0s"},
		{[]string{"status", "-o", "yaml"}, `-o: "yaml"`},
		{[]string{"status", "--cluster", "a.b"}, `--cluster: "a.b"`},
		{[]string{"status", "--user", ""}, "--user: empty"},
		{[]string{"status", "extra"}, "takes no arguments"},
		{[]string{"freeze"}, `unknown command "freeze"`},
		{[]string{"pause", "cordon", "--for", "soon"}, "invalid value"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, errOut := run(t, memRecords{}, tt.args...)
			if code != ExitUsage || !strings.Contains(errOut, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, ExitUsage, tt.want)
			}
		})
	}
}

func TestPauseResumeStatus(t *testing.T) {
	recs := memRecords{}
	if code, out, errOut := run(t, recs, "pause", "cordon", "--for", "30s", "--reason", "incident 42"); code != 0 ||
		!strings.Contains(out, "cordon paused by sre until 2026-12-07T10:00:30Z: incident 42 in cluster prod") {
		t.Fatalf("pause: %d %q %q", code, out, errOut)
	}
	if r := recs["cordon"]; !r.Until.Equal(now.Add(30*time.Second)) || !r.Since.Equal(now) || r.By != "sre" || r.Reason != "incident 42" {
		t.Fatalf("record %+v", r)
	}
	recs[pause.All] = pause.Record{Since: now, Until: now.Add(time.Hour), By: "lead"}
	recs["cleanup"] = pause.Record{Since: now.Add(-2 * time.Hour), Until: now.Add(-time.Hour)} // expired
	code, out, _ := run(t, recs, "status", "-o", "json")
	if code != 0 {
		t.Fatalf("status exit %d", code)
	}
	var st []Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"cordon": pause.All, "cleanup": pause.All, "report": pause.All, "notifier": pause.All}
	for _, s := range st {
		if !s.Paused || s.Via != want[s.Actor] {
			t.Fatalf("status %+v: want paused via %s", s, want[s.Actor])
		}
	}
	if code, _, errOut := run(t, recs, "resume", "cordon"); code != 0 || !strings.Contains(errOut, "still held by the pause of all") {
		t.Fatalf("resume while all holds: %d %q", code, errOut)
	}
	run(t, recs, "resume", "all")
	recs["report"] = pause.Record{Since: now}
	_, out, _ = run(t, recs, "status")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "ACTOR") || !strings.Contains(lines[1], "cordon ") || !strings.Contains(lines[1], " no ") ||
		!strings.Contains(lines[3], "report ") || !strings.Contains(lines[3], " yes ") || !strings.Contains(lines[3], "resumed") {
		t.Fatalf("status table:\n%s", out)
	}
}

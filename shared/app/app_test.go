package app

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(good, []byte("autoCordon:\n  maxPods: 5\n  minPods: 2\n"), 0o600)
	os.WriteFile(bad, []byte("autoCordon:\n  maxPodz: 5\n"), 0o600)
	spec := Spec{Service: "cordon", Actor: true}
	ok := func(context.Context, *Runtime) error { return nil }
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		run      func(context.Context, *Runtime) error
		code     int
		inStderr string
		inStdout string
	}{
		{"clean run", []string{"--config", good, "--listen", "127.0.0.1:0"}, nil, ok, ExitOK, "", ""},
		{"version", []string{"--version"}, nil, ok, ExitOK, "", "opswire-cordon"},
		{"unknown flag", []string{"--colour"}, nil, ok, ExitUsage, "colour", ""},
		{"bad config names key", []string{"--config", bad}, nil, ok, ExitUsage, "autoCordon.maxPodz", ""},
		{"missing config", []string{"--config", filepath.Join(dir, "nope.yml")}, nil, ok, ExitUsage, "nope.yml", ""},
		{"bad log level", []string{"--config", good, "--log-level", "loud"}, nil, ok, ExitUsage, "loud", ""},
		{"bad cluster flag", []string{"--config", good, "--cluster", "a.b", "--listen", "127.0.0.1:0"}, nil, ok, ExitUsage, "cluster.name", ""},
		{"env sets flags", []string{"--listen", "127.0.0.1:0"}, map[string]string{"OPSWIRE_CONFIG": bad}, ok, ExitUsage, "maxPodz", ""},
		{"dry-run env must be a boolean", []string{"--config", good}, map[string]string{"OPSWIRE_DRY_RUN": "yes"}, ok, ExitUsage, "OPSWIRE_DRY_RUN", ""},
		{"manage-streams env must be a boolean", []string{"--config", good}, map[string]string{"OPSWIRE_MANAGE_STREAMS": "no"}, ok, ExitUsage, "OPSWIRE_MANAGE_STREAMS", ""},
		{"runtime failure", []string{"--config", good, "--listen", "127.0.0.1:0"}, nil,
			func(context.Context, *Runtime) error { return errors.New("boom") }, ExitFailure, "boom", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string { return tc.env[k] }
			code := Run(spec, tc.args, getenv, &stdout, &stderr, tc.run)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.inStderr) || !strings.Contains(stdout.String(), tc.inStdout) {
				t.Fatalf("output missing %q/%q: stdout %q stderr %q", tc.inStdout, tc.inStderr, stdout.String(), stderr.String())
			}
		})
	}
}

func TestRuntimeSeesOptions(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yml")
	os.WriteFile(cfg, []byte("cluster:\n  name: prod\n"), 0o600)
	var got *Runtime
	var stderr bytes.Buffer
	code := Run(Spec{Service: "cleanup", Actor: true}, []string{"--config", cfg, "--listen", "127.0.0.1:0", "--id", "me"},
		func(k string) string {
			return map[string]string{"OPSWIRE_DRY_RUN": "true", "OPSWIRE_MANAGE_STREAMS": "0"}[k]
		}, &stderr, &stderr,
		func(_ context.Context, rt *Runtime) error { got = rt; return nil })
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if got.Cluster != "prod" || !got.Options.DryRun || got.Options.ID != "me" || got.Options.ManageStreams {
		t.Fatalf("runtime = cluster %q dryRun %v id %q manageStreams %v", got.Cluster, got.Options.DryRun, got.Options.ID, got.Options.ManageStreams)
	}
}

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	const hook = "https://open.feishu.cn/open-apis/bot/v2/hook/very-secret-token"
	good := filepath.Join(dir, "good.yml")
	bad := filepath.Join(dir, "bad.yml")
	os.WriteFile(good, []byte("autoCordon:\n  maxPods: 5\n  minPods: 2\ndelException:\n  enable: true\n  apiurl: \""+hook+"\"\n"), 0o600)
	os.WriteFile(bad, []byte("autoCordon:\n  maxPodz: 5\n  minPods: -1\nsendReport:\n  schedule: \"not cron\"\n"), 0o600)
	spec := Spec{Service: "cleanup", Actor: true}
	never := func(context.Context, *Runtime) error {
		t.Error("--check-config must not run the service")
		return nil
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		inStdout   []string
		inStderr   []string
		notInOuput string
	}{
		{"valid prints the effective config", []string{"--check-config", "--config", good}, ExitOK,
			[]string{"is valid", "maxPods: 5", "minPods: 2", "<redacted>"}, nil, "very-secret-token"},
		{"defaults are filled in", []string{"--check-config", "--config", good}, ExitOK,
			[]string{"cluster:", "name: default"}, nil, ""},
		{"--cluster is applied", []string{"--check-config", "--config", good, "--cluster", "prod"}, ExitOK,
			[]string{"name: prod"}, nil, ""},
		{"invalid names the field", []string{"--check-config", "--config", bad}, ExitUsage,
			nil, []string{"invalid configuration (3 problems)", "autoCordon.maxPodz", "autoCordon.minPods", "sendReport.schedule"}, ""},
		{"invalid --cluster", []string{"--check-config", "--config", good, "--cluster", "a.b"}, ExitUsage,
			nil, []string{"cluster.name"}, ""},
		{"missing file", []string{"--check-config", "--config", filepath.Join(dir, "nope.yml")}, ExitUsage,
			nil, []string{"nope.yml"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Run(spec, tc.args, func(string) string { return "" }, &stdout, &stderr, never)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			for _, s := range tc.inStdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tc.inStderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if tc.notInOuput != "" && strings.Contains(stdout.String()+stderr.String(), tc.notInOuput) {
				t.Errorf("output leaks %q", tc.notInOuput)
			}
		})
	}
}

// TestDryRunLease: a dry-run actor competes for its own Lease, never the
// production one.
func TestDryRunLease(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yml")
	os.WriteFile(cfg, []byte("controller:\n  leaseLockName: ops\n"), 0o600)
	var real, dry string
	var stderr bytes.Buffer
	code := Run(Spec{Service: "cordon", Actor: true}, []string{"--config", cfg, "--listen", "127.0.0.1:0"},
		func(string) string { return "" }, &stderr, &stderr,
		func(_ context.Context, rt *Runtime) error {
			real, dry = rt.LeaseName(false), rt.LeaseName(true)
			return nil
		})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if real != "ops-cordon" || dry != "ops-cordon-dryrun" {
		t.Fatalf("leases %q and %q, want ops-cordon and ops-cordon-dryrun", real, dry)
	}
}

func TestMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := applyMemoryLimit(env(map[string]string{MemoryLimitEnv: "300Mi"}), zerolog.Nop()); got != 300<<20*9/10 {
		t.Errorf("300Mi: limit %d, want %d", got, 300<<20*9/10)
	}
	if got := debug.SetMemoryLimit(-1); got != 300<<20*9/10 {
		t.Errorf("runtime limit %d", got)
	}
	if got := applyMemoryLimit(env(map[string]string{MemoryLimitEnv: "1000000"}), zerolog.Nop()); got != 900000 {
		t.Errorf("bytes: limit %d", got)
	}
	for _, m := range []map[string]string{
		{},
		{MemoryLimitEnv: "300Mi", "GOMEMLIMIT": "100MiB"},
		{MemoryLimitEnv: "lots"},
	} {
		if got := applyMemoryLimit(env(m), zerolog.Nop()); got != 0 {
			t.Errorf("%v: limit %d, want none", m, got)
		}
	}
}

// Services that retry every publish themselves (actors, the watcher) connect
// without nats.go's reconnect buffer, so nothing they published while
// disconnected is sent unseen at reconnect; the others keep the default.
func TestNATSReconnectBuffer(t *testing.T) {
	for _, c := range []struct {
		spec Spec
		want int
	}{
		{Spec{Service: "cordon", Actor: true}, -1},
		{Spec{Service: "watcher", NoPublishBuffer: true}, -1},
		{Spec{Service: "notifier", NoKube: true}, 0}, // natsx.Connect's 8 MiB
	} {
		rt := &Runtime{Spec: c.spec}
		if got := rt.natsOptions().ReconnectBufSize; got != c.want {
			t.Errorf("%s: ReconnectBufSize %d, want %d", c.spec.Service, got, c.want)
		}
	}
}

// --check-config names the trade-off of cordon's taint mode (DaemonSet pods
// deleted on a tainted node are not re-created) before the service runs.
func TestCheckConfigWarnsOfTaintMode(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode string
		warn bool
	}{{"cordon", false}, {"taint", true}} {
		t.Run(tc.mode, func(t *testing.T) {
			path := filepath.Join(dir, tc.mode+".yml")
			if err := os.WriteFile(path, []byte("autoCordon:\n  mode: "+tc.mode+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Run(Spec{Service: "cordon", Actor: true}, []string{"--check-config", "--config", path},
				func(string) string { return "" }, &stdout, &stderr, func(context.Context, *Runtime) error { return nil })
			if code != ExitOK || strings.Contains(stderr.String(), "DaemonSet") != tc.warn {
				t.Fatalf("exit %d, stderr %q; want 0 and a DaemonSet warning %v", code, stderr.String(), tc.warn)
			}
		})
	}
}

// --check-config of the notifier says when the cards are zh-CN because the
// titles are Chinese and no locale is set (the seed's config), and not when
// the locale is set.
func TestCheckConfigNamesTheInferredLocale(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, doc string
		note      bool
	}{
		{"chinese titles", "sendReport:\n  msgtitle: pod重启次数过多\n", true},
		{"locale set", "sendReport:\n  msgtitle: pod重启次数过多\nnotifier:\n  locale: zh-CN\n", false},
		{"english titles", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "c.yml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Run(Spec{Service: "notifier", NoKube: true}, []string{"--check-config", "--config", path},
				func(string) string { return "" }, &stdout, &stderr, func(context.Context, *Runtime) error { return nil })
			note := strings.Contains(stdout.String(), "# note: notifier.locale is not set and sendReport.msgtitle")
			if code != ExitOK || note != tc.note {
				t.Fatalf("exit %d, note %v (want %v); stdout:\n%s\nstderr: %s", code, note, tc.note, stdout.String(), stderr.String())
			}
		})
	}
}

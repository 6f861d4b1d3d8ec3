package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSeedConfigLoadsWithSameMeaning(t *testing.T) {
	c, err := Load("testdata/seed.yml")
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"sendReport.total", c.SendReport.Total, int64(100)},
		{"sendReport.schedule", c.SendReport.Schedule, "00 00 10 * * 1"},
		{"sendReport.msgtitle", c.SendReport.MsgTitle, "pod重启次数过多"},
		{"sendReport.apiurl", c.SendReport.APIURL.Value(), "https://open.feishu.cn/open-apis/bot/v2/hook/xxx"},
		{"sendReport.enable", c.SendReport.Enable, true},
		{"autoCordon.interval", c.AutoCordon.Interval.Duration, time.Minute},
		{"kube.serverRequestTimeout", c.Kube.ServerRequestTimeout.Duration, 60 * time.Second},
		{"autoCordon.maxPods", c.AutoCordon.MaxPods, 100},
		{"autoCordon.minPods", c.AutoCordon.MinPods, 90},
		{"delException.interval", c.DelException.Interval.Duration, 2 * time.Minute},
		{"delException.msgtitle", c.DelException.MsgTitle, "删除异常状态 Pod"},
		{"controller.controllerResyncPeriod", c.Controller.ControllerResyncPeriod.Duration, 10 * time.Second},
		{"controller.InformersResyncPeriod", c.Controller.InformersResyncPeriod.Duration, 30 * time.Second},
		{"controller.LeaderElect", c.Controller.LeaderElect, true},
		{"controller.leaseLockName", c.Controller.LeaseLockName, "ops-resource-controller"},
		{"controller.leaseLockNamespace", c.Controller.LeaseLockNamespace, "kube-system"},
		{"cluster.name (default)", c.Cluster.Name, "default"},
		{"delException.reasons (default)", strings.Join(c.DelException.Reasons, ","), "Evicted"},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
	if _, err := CronParser.Parse(c.SendReport.Schedule); err != nil {
		t.Errorf("seed schedule does not parse: %v", err)
	}
}

func TestKeysAreCaseInsensitive(t *testing.T) {
	c, err := Parse([]byte("AUTOCORDON:\n  MAXPODS: 7\n  minpods: 3\nController:\n  leaderelect: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.AutoCordon.MaxPods != 7 || c.AutoCordon.MinPods != 3 || c.Controller.LeaderElect {
		t.Fatalf("got %+v %+v", c.AutoCordon, c.Controller)
	}
}

func TestInvalidConfigNamesTheField(t *testing.T) {
	tests := []struct {
		name, doc string
		fields    []string
	}{
		{"unknown top key", "autoCordn:\n  enable: true\n", []string{"autoCordn"}},
		{"unknown nested key", "autoCordon:\n  maxPod: 3\n", []string{"autoCordon.maxPod"}},
		{"unknown key in list item", "notifier:\n  receivers:\n  - name: a\n    type: feishu\n    url: x\n    colour: red\n", []string{"notifier.receivers[0].colour"}},
		{"min above max", "autoCordon:\n  maxPods: 10\n  minPods: 20\n", []string{"autoCordon.minPods"}},
		{"bad schedule", "sendReport:\n  schedule: \"every monday\"\n", []string{"sendReport.schedule"}},
		{"bad duration", "autoCordon:\n  interval: soon\n", []string{"autoCordon.interval"}},
		{"wrong type", "autoCordon:\n  maxPods: many\n", []string{"autoCordon.maxPods"}},
		{"several at once", "autoCordon:\n  mode: drain\nkube:\n  qps: -1\n", []string{"autoCordon.mode", "kube.qps"}},
		{"bad cluster name", "cluster:\n  name: a.b\n", []string{"cluster.name"}},
		{"image cap zero", "watcher:\n  nodeStatusMaxImages: 0\n", []string{"watcher.nodeStatusMaxImages"}},
		{"duplicate by case", "autoCordon:\n  maxPods: 10\n  MaxPods: 20\n", []string{"autoCordon.maxPods"}},
		{"API server request timeout zero", "kube:\n  serverRequestTimeout: 0s\n", []string{"kube.serverRequestTimeout"}},
		{"API server request timeout an hour (a typo for 60s?)", "kube:\n  serverRequestTimeout: 60m\n", []string{"kube.serverRequestTimeout"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error = %v, want Errors", err)
			}
			got := map[string]bool{}
			for _, fe := range errs {
				got[fe.Field] = true
			}
			for _, f := range tc.fields {
				if !got[f] {
					t.Errorf("errors %v do not name %q", err, f)
				}
			}
		})
	}
}

func TestSecretNeverPrints(t *testing.T) {
	c, err := Load("testdata/seed.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprintf("%v", c), fmt.Sprintf("%+v", c), fmt.Sprintf("%#v", c.SendReport), fmt.Sprint(c.SendReport.APIURL)} {
		if strings.Contains(s, "hook/xxx") {
			t.Fatalf("secret leaked in %q", s)
		}
	}
}

func TestResolveSecret(t *testing.T) {
	t.Setenv("OPSWIRE_TEST_SECRET", " from-env\n")
	got, err := ResolveSecret("", "", "OPSWIRE_TEST_SECRET")
	if err != nil || got.Value() != "from-env" {
		t.Fatalf("ResolveSecret env = %q, %v", got.Value(), err)
	}
	if _, err := ResolveSecret("", "", "OPSWIRE_TEST_UNSET"); err == nil {
		t.Fatal("unset variable: want error")
	}
}

// TestOpsSources: a fleet hub's list of clusters is cluster names, each once.
func TestOpsSources(t *testing.T) {
	c, err := Parse([]byte("nats:\n  opsSources: [a, prod-eu]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.NATS.OpsSources; len(got) != 2 || got[0] != "a" || got[1] != "prod-eu" {
		t.Fatalf("opsSources = %v", got)
	}
	for doc, field := range map[string]string{
		"nats:\n  opsSources: [a, a]\n":       "nats.opsSources[1]",
		"nats:\n  opsSources: [a, \"b.c\"]\n": "nats.opsSources[1]",
		"nats:\n  opsSources: [\"\"]\n":       "nats.opsSources[0]",
		"nats:\n  opsSources: [\"x*\", ok]\n": "nats.opsSources[0]",
	} {
		_, err := Parse([]byte(doc))
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != field {
			t.Errorf("%q: err = %v, want one error naming %s", doc, err, field)
		}
	}
}

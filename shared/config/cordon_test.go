package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAutoCordonDefaults(t *testing.T) {
	c, err := Parse([]byte("autoCordon:\n  enable: true\n  interval: 1m\n  maxPods: 100\n  minPods: 90\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := c.AutoCordon
	checks := []struct {
		name      string
		got, want any
	}{
		{"mode", a.Mode, CordonModeCordon},
		{"taintKey", a.TaintKey, "node.kubernetes.io/autocordon"},
		{"maxCordonedPercent", a.MaxCordonedPercent, 20.0},
		{"maxCordonedNodes", a.MaxCordonedNodes, 0},
		{"maxActionsPerMinute", a.MaxActionsPerMinute, 60},
		{"rateWindow", a.RateWindow.Duration, time.Minute},
		{"includeControlPlane", a.IncludeControlPlane, false},
		{"dryRun", a.DryRun, false},
		{"nodeSelector", a.NodeSelector, ""},
		{"selector matches everything", a.Selector().Empty(), true},
		{"capCounts", a.CapCounts, CapCountsUnavailable},
		{"ignoreTaintKeys", len(a.IgnoreTaintKeys), 0},
		{"alwaysCountTaintKeys", strings.Join(a.AlwaysCountTaintKeys, ","), "ToBeDeletedByClusterAutoscaler"},
		{"drainEvictingPercent", a.DrainEvictingPercent, 50.0},
		{"drainEvictedPercent", a.DrainEvictedPercent, 50.0},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}

func TestAutoCordonValidation(t *testing.T) {
	tests := []struct {
		name, doc string
		field     string // "" = valid
	}{
		{"seed section", "maxPods: 100\nminPods: 90", ""},
		{"percent thresholds", "maxPodsPercent: 90\nminPodsPercent: 80", ""},
		{"taint mode", "mode: taint\ntaintKey: example.com/busy", ""},
		{"selector", "nodeSelector: 'pool in (web,api),!spot'", ""},
		{"min not below max", "maxPods: 10\nminPods: 10", "autoCordon.minPods"},
		{"max zero", "maxPods: 0\nminPods: 0", "autoCordon.maxPods"},
		{"negative min", "minPods: -1", "autoCordon.minPods"},
		{"percent over 100", "maxPodsPercent: 120", "autoCordon.maxPodsPercent"},
		{"min percent not below max", "maxPodsPercent: 80\nminPodsPercent: 80", "autoCordon.minPodsPercent"},
		{"min percent alone", "minPodsPercent: 50", "autoCordon.maxPodsPercent"},
		{"unknown mode", "mode: drain", "autoCordon.mode"},
		{"empty taint key in taint mode", "mode: taint\ntaintKey: ''", "autoCordon.taintKey"},
		{"invalid taint key", "mode: taint\ntaintKey: 'not a key'", "autoCordon.taintKey"},
		{"bad selector", "nodeSelector: 'pool in (web'", "autoCordon.nodeSelector"},
		{"negative node cap", "maxCordonedNodes: -1", "autoCordon.maxCordonedNodes"},
		{"percent cap over 100", "maxCordonedPercent: 101", "autoCordon.maxCordonedPercent"},
		{"no actions per minute", "maxActionsPerMinute: 0", "autoCordon.maxActionsPerMinute"},
		{"actions per minute beyond any window", "maxActionsPerMinute: 2000000", "autoCordon.maxActionsPerMinute"},
		{"cap counts marks", "capCounts: marks", ""},
		{"unknown cap counts", "capCounts: all", "autoCordon.capCounts"},
		{"taint key lists", "ignoreTaintKeys: [dedicated, 'example.com/*', '*']\nalwaysCountTaintKeys: [ToBeDeletedByClusterAutoscaler]", ""},
		{"invalid ignored taint key", "ignoreTaintKeys: [ok, 'not a key']", "autoCordon.ignoreTaintKeys[1]"},
		{"invalid always-count taint key", "alwaysCountTaintKeys: ['a b*']", "autoCordon.alwaysCountTaintKeys[0]"},
		{"drain percent over 100", "drainEvictingPercent: 150", "autoCordon.drainEvictingPercent"},
		{"drained-away percent below 0", "drainEvictedPercent: -1", "autoCordon.drainEvictedPercent"},
		{"zero interval", "interval: 0s", "autoCordon.interval"},
		{"misspelt key", "maxPod: 5", "autoCordon.maxPod"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "autoCordon:\n  " + strings.ReplaceAll(tc.doc, "\n", "\n  ") + "\n"
			_, err := Parse([]byte(doc))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid section rejected: %v", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v is not a field error list", err)
			}
			for _, fe := range errs {
				if strings.EqualFold(fe.Field, tc.field) {
					return
				}
			}
			t.Fatalf("error %v does not name %s", err, tc.field)
		})
	}
}

func TestAutoCordonWarnsOfTaintModesTradeOff(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // substrings of the one warning; nil: none
	}{
		{"cordon mode", "autoCordon:\n  mode: cordon\n", nil},
		{"taint mode", "autoCordon:\n  mode: taint\n  taintKey: example.com/full\n",
			[]string{"DaemonSet", "example.com/full:NoSchedule", "not re-created", "toleration", `"cordon"`}},
		{"taint mode, disabled", "autoCordon:\n  enable: false\n  mode: taint\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got := c.AutoCordon.Warnings()
			if tc.want == nil {
				if len(got) != 0 {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("warnings %q, want one", got)
			}
			for _, s := range tc.want {
				if !strings.Contains(got[0], s) {
					t.Errorf("warning %q does not say %q", got[0], s)
				}
			}
		})
	}
}

package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDelExceptionDefaults(t *testing.T) {
	c, err := Parse([]byte("delException:\n  enable: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := c.DelException
	checks := []struct {
		name      string
		got, want any
	}{
		{"interval", d.Interval.Duration, 2 * time.Minute},
		{"reasons", strings.Join(d.Reasons, ","), "Evicted"},
		{"minAge", d.MinAge.Duration, time.Duration(0)},
		{"terminatingTimeout", d.TerminatingTimeout.Duration, 5 * time.Minute},
		{"removeFinalizers", d.RemoveFinalizers, false},
		{"allowStatefulSetOnReadyNode", d.AllowStatefulSetOnReadyNode, false},
		{"statefulNotReadyTimeout", d.StatefulNotReadyTimeout.Duration, time.Duration(0)},
		{"brakeNotReadyShare", d.BrakeNotReadyShare, 1.0 / 3},
		{"optOutLabel", d.OptOutLabel, "opswire.io/ignore"},
		{"maxDeletionsPerMinute", d.MaxDeletionsPerMinute, 60},
		{"rateWindow", d.RateWindow.Duration, time.Minute},
		{"dryRun", d.DryRun, false},
	}
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s = %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}

func TestDelExceptionOverrides(t *testing.T) {
	doc := `
delException:
  interval: 5s
  reasons: [Evicted, OutOfcpu, NodeAffinity]
  minAge: 10m
  terminatingTimeout: 90s
  removeFinalizers: true
  allowStatefulSetOnReadyNode: true
  statefulNotReadyTimeout: 10m
  brakeNotReadyShare: 0.5
  namespaces: {include: [apps], exclude: [kube-system]}
  optOutLabel: example.com/keep
  maxDeletionsPerMinute: 20
  rateWindow: 2s
  dryRun: true
`
	c, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	d := c.DelException
	if got := strings.Join(d.Reasons, ","); got != "Evicted,OutOfcpu,NodeAffinity" {
		t.Errorf("reasons = %s", got)
	}
	if d.Interval.Duration != 5*time.Second || d.MinAge.Duration != 10*time.Minute ||
		d.TerminatingTimeout.Duration != 90*time.Second || d.RateWindow.Duration != 2*time.Second {
		t.Errorf("durations = %v %v %v %v", d.Interval, d.MinAge, d.TerminatingTimeout, d.RateWindow)
	}
	if !d.RemoveFinalizers || !d.AllowStatefulSetOnReadyNode || !d.DryRun || d.MaxDeletionsPerMinute != 20 {
		t.Errorf("flags = %+v", d)
	}
	if d.StatefulNotReadyTimeout.Duration != 10*time.Minute || d.BrakeNotReadyShare != 0.5 {
		t.Errorf("partition settings = %v %v", d.StatefulNotReadyTimeout, d.BrakeNotReadyShare)
	}
	if d.OptOutLabel != "example.com/keep" || !d.Namespaces.Allows("apps") || d.Namespaces.Allows("kube-system") {
		t.Errorf("filters = %q %+v", d.OptOutLabel, d.Namespaces)
	}
}

func TestDelExceptionInvalid(t *testing.T) {
	tests := []struct {
		name, doc, field string
	}{
		{"zero interval", "delException: {interval: 0s}", "delException.interval"},
		{"empty reason", "delException: {reasons: [Evicted, '']}", "delException.reasons[1]"},
		{"duplicate reason", "delException: {reasons: [Evicted, Evicted]}", "delException.reasons[1]"},
		{"duplicate reason in another case", "delException: {reasons: [Evicted, evicted]}", "delException.reasons[1]"},
		{"negative statefulNotReadyTimeout", "delException: {statefulNotReadyTimeout: -1s}", "delException.statefulNotReadyTimeout"},
		{"zero brake share", "delException: {brakeNotReadyShare: 0}", "delException.brakeNotReadyShare"},
		{"brake share above 1", "delException: {brakeNotReadyShare: 1.5}", "delException.brakeNotReadyShare"},
		{"negative minAge", "delException: {minAge: -1s}", "delException.minAge"},
		{"negative timeout", "delException: {terminatingTimeout: -1s}", "delException.terminatingTimeout"},
		{"no deletions allowed", "delException: {maxDeletionsPerMinute: 0}", "delException.maxDeletionsPerMinute"},
		{"deletions beyond any window", "delException: {maxDeletionsPerMinute: 2000000}", "delException.maxDeletionsPerMinute"},
		{"zero window", "delException: {rateWindow: 0s}", "delException.rateWindow"},
		{"bad label key", "delException: {optOutLabel: 'not a label'}", "delException.optOutLabel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error = %v, want Errors", err)
			}
			for _, fe := range errs {
				if fe.Field == tc.field {
					return
				}
			}
			t.Fatalf("no error for %s in %v", tc.field, err)
		})
	}
}

func TestDelExceptionEmptyOptOutDisables(t *testing.T) {
	c, err := Parse([]byte("delException: {optOutLabel: ''}"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DelException.OptOutLabel != "" {
		t.Fatalf("optOutLabel = %q, want empty", c.DelException.OptOutLabel)
	}
}

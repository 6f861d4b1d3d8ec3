package route

import (
	"strings"
	"testing"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

func TestSubjectMatches(t *testing.T) {
	tests := []struct {
		pattern, subject string
		want             bool
	}{
		{"ops.>", "ops.prod.cleanup.deleted.ns.pod", true},
		{"ops.*.cleanup.>", "ops.prod.cleanup.deleted.ns.pod", true},
		{"ops.*.cleanup.>", "ops.prod.cleanup", false},
		{"ops.*.report.restarts", "ops.prod.report.restarts", true},
		{"ops.*.report.restarts", "ops.prod.report.restarts.x", false},
		{"ops.prod.*", "ops.prod.cordon", true},
		{"ops.prod.*", "ops.dev.cordon", false},
		{"ops.*.cordon.*.*", "ops.prod.cordon.cordoned.node-1", true},
	}
	for _, tc := range tests {
		if got := SubjectMatches(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	routes := []config.Route{
		{Name: "seed", Subjects: []string{"ops.*.cleanup.>"}, Receivers: []string{"delException"}, Continue: true},
		{Name: "critical", Severities: []string{"critical"}, Receivers: []string{"oncall"}},
		{Name: "team-a", Namespaces: config.Namespaces{Include: []string{"team-a"}}, Receivers: []string{"team-a"}},
		{Name: "rest-of-cleanup", Subjects: []string{"ops.*.cleanup.>"}, Namespaces: config.Namespaces{Exclude: []string{"kube-system"}}, Receivers: []string{"ops"}},
	}
	tbl := New(routes, []string{"catchall"}, config.Duration{}, config.Duration{})
	item := func(subj string, sev events.Severity, ns string) *notify.Item {
		return &notify.Item{Subject: subj, Severity: sev, Namespace: ns}
	}
	tests := []struct {
		name string
		it   *notify.Item
		want []string
	}{
		{"continue then critical stops", item("ops.p.cleanup.failed.team-a.x", "critical", "team-a"), []string{"seed", "critical"}},
		{"continue then namespace", item("ops.p.cleanup.deleted.team-a.x", "info", "team-a"), []string{"seed", "team-a"}},
		{"continue then excluded namespace falls to nothing more", item("ops.p.cleanup.deleted.kube-system.x", "info", "kube-system"), []string{"seed"}},
		{"no namespace never matches an include list", item("ops.p.cordon.cordoned.n1", "info", ""), []string{"default"}},
		{"unmatched goes to default", item("ops.p.report.restarts", "warning", ""), []string{"default"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tbl.Match(tc.it)
			var names []string
			for _, r := range got {
				names = append(names, r.Name)
			}
			if len(names) != len(tc.want) {
				t.Fatalf("routes = %v, want %v", names, tc.want)
			}
			for i := range names {
				if names[i] != tc.want[i] {
					t.Fatalf("routes = %v, want %v", names, tc.want)
				}
			}
		})
	}
	if got := New(nil, nil, config.Duration{}, config.Duration{}).Match(item("ops.p.x", "info", "")); len(got) != 0 {
		t.Fatalf("no routes and no defaults: want dropped, got %v", got)
	}
}

// TestMatchClusters: routes[].clusters next to the other matchers, on items
// of a fleet stream (their cluster is their subject's token).
func TestMatchClusters(t *testing.T) {
	routes := []config.Route{
		{Name: "b-critical", Clusters: []string{"b"}, Severities: []string{"critical"}, Receivers: []string{"b-oncall"}},
		{Name: "b", Clusters: []string{"b"}, Receivers: []string{"b-team"}, Continue: true},
		{Name: "a-or-c-cleanup", Clusters: []string{"a", "c"}, Subjects: []string{"ops.*.cleanup.>"}, Receivers: []string{"ac"}},
		{Name: "payments-anywhere", Namespaces: config.Namespaces{Include: []string{"payments"}}, Receivers: []string{"pay"}},
		{Name: "a-cordon", Clusters: []string{"a"}, Subjects: []string{"ops.b.cordon.>"}, Receivers: []string{"never"}},
	}
	tbl := New(routes, []string{"catchall"}, config.Duration{}, config.Duration{})
	item := func(subj string, sev events.Severity, ns string) *notify.Item {
		return &notify.Item{Subject: subj, Cluster: notify.ClusterToken(subj), Severity: sev, Namespace: ns}
	}
	tests := []struct {
		name string
		it   *notify.Item
		want []string
	}{
		{"b critical stops", item("ops.b.cleanup.failed.payments.x", "critical", "payments"), []string{"b-critical"}},
		{"b continues to the namespace route", item("ops.b.cleanup.deleted.payments.x", "info", "payments"), []string{"b", "payments-anywhere"}},
		{"b alone", item("ops.b.cordon.cordoned.n1", "info", ""), []string{"b"}},
		{"a cleanup", item("ops.a.cleanup.deleted.payments.x", "info", "payments"), []string{"a-or-c-cleanup"}},
		{"c cleanup", item("ops.c.cleanup.deleted.ns.x", "warning", "ns"), []string{"a-or-c-cleanup"}},
		{"a critical is not b's", item("ops.a.report.restarts", "critical", ""), []string{"default"}},
		{"cluster and subject must both match", item("ops.a.cordon.cordoned.n1", "info", ""), []string{"default"}},
		{"other cluster's namespace route", item("ops.d.cleanup.deleted.payments.x", "info", "payments"), []string{"payments-anywhere"}},
		{"a cluster whose name is a prefix", item("ops.bb.cordon.cordoned.n1", "info", ""), []string{"default"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			for _, r := range tbl.Match(tc.it) {
				names = append(names, r.Name)
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("routes = %v, want %v", names, tc.want)
			}
		})
	}
}

package render

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/events"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func cleanupItem(id string, sev events.Severity, at time.Time, d events.CleanupDecision) *notify.Item {
	d.Severity = sev
	return &notify.Item{ID: id, Kind: notify.KindCleanup, Severity: sev, Namespace: d.Namespace, Time: at, Cleanup: &d}
}

func cordonItem(id string, sev events.Severity, at time.Time, d events.CordonDecision) *notify.Item {
	d.Severity = sev
	return &notify.Item{ID: id, Kind: notify.KindCordon, Severity: sev, Time: at, Cordon: &d}
}

func imageItem(id string, sev events.Severity, at time.Time, a events.ImageAlert) *notify.Item {
	a.Severity = sev
	return &notify.Item{ID: id, Kind: notify.KindImages, Severity: sev, Time: at, Image: &a}
}

func reportItem(id string, r events.RestartReport) *notify.Item {
	return &notify.Item{ID: id, Kind: notify.KindRestarts, Severity: r.Severity, Time: r.Tick, Report: &r}
}

func renderOne(t *testing.T, g Group, items []*notify.Item) *notify.Notification {
	t.Helper()
	ns := Render(g, items)
	if len(ns) != 1 {
		t.Fatalf("Render gave %d notifications, want 1", len(ns))
	}
	return ns[0]
}

func col(rows [][]string, i int) []string {
	out := make([]string, len(rows))
	for r, row := range rows {
		out[r] = row[i]
	}
	return out
}

// TestCleanupSummaryCounts: the summary accounts for every event, counted
// by verb, by pod reason (falling back to the phase) and by namespace, most
// frequent first; pod reasons and namespaces beyond the top five are summed
// up.
func TestCleanupSummaryCounts(t *testing.T) {
	tests := []struct {
		name  string
		items []*notify.Item
		want  []string // lines (or parts of lines) of the summary
		not   []string
	}{
		{
			name: "counts by reason and verb",
			items: []*notify.Item{
				cleanupItem("1", events.SeverityInfo, t0, events.CleanupDecision{Verb: "deleted", Namespace: "a", Pod: "p1", PodReason: "Evicted"}),
				cleanupItem("2", events.SeverityInfo, t0, events.CleanupDecision{Verb: "deleted", Namespace: "a", Pod: "p2", PodReason: "Evicted"}),
				cleanupItem("3", events.SeverityInfo, t0, events.CleanupDecision{Verb: "deleted", Namespace: "b", Pod: "p3", PodReason: "Evicted"}),
				cleanupItem("4", events.SeverityWarning, t0, events.CleanupDecision{Verb: "failed", Namespace: "b", Pod: "p4", Phase: "Failed", Error: "forbidden"}),
				cleanupItem("5", events.SeverityInfo, t0, events.CleanupDecision{Verb: "deleted", Namespace: "c", Pod: "p5"}),
			},
			want: []string{
				"**5** cleanup results: deleted 4, failed 1",
				"**Pod reasons:** Evicted 3, - 1, Failed 1",
				"**Namespaces:** a 2, b 2, c 1",
			},
			not: []string{"**Pod:**"},
		},
		{
			name: "single event names the pod and the error",
			items: []*notify.Item{
				cleanupItem("1", events.SeverityWarning, t0, events.CleanupDecision{Verb: "failed", Namespace: "ns", Pod: "web-0", Node: "n1", Reason: "evicted for 2h", Error: "pods \"web-0\" is forbidden"}),
			},
			want: []string{
				"**1** cleanup results: failed 1",
				"**Pod:** ns/web-0  **Node:** n1",
				"**Why:** evicted for 2h",
				`**Error:** pods "web-0" is forbidden`,
			},
		},
		{
			name: "more than five namespaces",
			items: func() []*notify.Item {
				var out []*notify.Item
				for i := 0; i < 7; i++ {
					for j := 0; j <= i; j++ {
						out = append(out, cleanupItem(fmt.Sprint(i, j), events.SeverityInfo, t0,
							events.CleanupDecision{Verb: "deleted", Namespace: fmt.Sprintf("ns%d", i), Pod: fmt.Sprintf("p%d", j), PodReason: "Evicted"}))
					}
				}
				return out
			}(),
			want: []string{
				"**28** cleanup results: deleted 28",
				"**Pod reasons:** Evicted 28",
				"**Namespaces:** ns6 7, ns5 6, ns4 5, ns3 4, ns2 3, and 2 more",
			},
		},
		{
			name: "more than five pod reasons",
			items: func() []*notify.Item {
				var out []*notify.Item
				for i := 0; i < 7; i++ {
					for j := 0; j <= i; j++ {
						out = append(out, cleanupItem(fmt.Sprint(i, j), events.SeverityInfo, t0,
							events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: fmt.Sprintf("p%d-%d", i, j), PodReason: fmt.Sprintf("Reason%d", i)}))
					}
				}
				return out
			}(),
			want: []string{
				"**28** cleanup results: deleted 28",
				"**Pod reasons:** Reason6 7, Reason5 6, Reason4 5, Reason3 4, Reason2 3, and 2 more",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := renderOne(t, Group{Route: "r", Key: "r/cleanup", Cluster: "prod", Now: t0}, tc.items)
			for _, w := range tc.want {
				if !strings.Contains(n.Summary, w) {
					t.Errorf("summary lacks %q:\n%s", w, n.Summary)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(n.Summary, w) {
					t.Errorf("summary has %q:\n%s", w, n.Summary)
				}
			}
			if len(n.Rows) != len(tc.items) || len(n.Items) != len(tc.items) {
				t.Errorf("%d rows and %d items for %d events", len(n.Rows), len(n.Items), len(tc.items))
			}
		})
	}
}

// TestRowsMostSevereFirst: rows (what a size-limited sink keeps) are the
// most severe first and, within a severity, the newest first; the
// notification takes the highest severity of its events.
func TestRowsMostSevereFirst(t *testing.T) {
	tests := []struct {
		name    string
		items   []*notify.Item
		col     int
		want    []string
		wantSev events.Severity
	}{
		{
			name: "cleanup",
			items: []*notify.Item{
				cleanupItem("1", events.SeverityInfo, t0.Add(1*time.Minute), events.CleanupDecision{Verb: "deleted", Namespace: "a", Pod: "info-old"}),
				cleanupItem("2", events.SeverityCritical, t0, events.CleanupDecision{Verb: "failed", Namespace: "a", Pod: "crit"}),
				cleanupItem("3", events.SeverityInfo, t0.Add(3*time.Minute), events.CleanupDecision{Verb: "deleted", Namespace: "a", Pod: "info-new"}),
				cleanupItem("4", events.SeverityWarning, t0.Add(2*time.Minute), events.CleanupDecision{Verb: "forcedeleted", Namespace: "a", Pod: "warn"}),
			},
			col:     0,
			want:    []string{"a/crit", "a/warn", "a/info-new", "a/info-old"},
			wantSev: events.SeverityCritical,
		},
		{
			name: "cordon",
			items: []*notify.Item{
				cordonItem("1", events.SeverityInfo, t0, events.CordonDecision{Verb: "uncordoned", Node: "n-info"}),
				cordonItem("2", events.SeverityWarning, t0, events.CordonDecision{Verb: "cordoned", Node: "n-warn"}),
			},
			col:     0,
			want:    []string{"n-warn", "n-info"},
			wantSev: events.SeverityWarning,
		},
		{
			name: "images",
			items: []*notify.Item{
				imageItem("1", events.SeverityInfo, t0.Add(time.Minute), events.ImageAlert{Node: "newer"}),
				imageItem("2", events.SeverityInfo, t0, events.ImageAlert{Node: "older"}),
				imageItem("3", events.SeverityCritical, t0, events.ImageAlert{Node: "crit"}),
			},
			col:     0,
			want:    []string{"crit", "newer", "older"},
			wantSev: events.SeverityCritical,
		},
		{
			name: "all info",
			items: []*notify.Item{
				cordonItem("1", events.SeverityInfo, t0, events.CordonDecision{Verb: "skipped", Node: "a"}),
			},
			col:     0,
			want:    []string{"a"},
			wantSev: events.SeverityInfo,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := renderOne(t, Group{Route: "r", Now: t0}, tc.items)
			if got := col(n.Rows, tc.col); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("row order %v, want %v", got, tc.want)
			}
			if n.Severity != tc.wantSev {
				t.Errorf("severity %s, want %s", n.Severity, tc.wantSev)
			}
			if len(n.Items) != len(tc.items) || n.Items[0] != tc.items[0] {
				t.Errorf("Items must be the group's items in their own order")
			}
		})
	}
}

// TestRowCells: each kind's table cells, including dry-run marking, errors
// replacing reasons, and the image size with its percentage.
func TestRowCells(t *testing.T) {
	tests := []struct {
		name    string
		item    *notify.Item
		columns []string
		want    []string
	}{
		{"cleanup reason and phase", cleanupItem("1", events.SeverityInfo, t0,
			events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p", Node: "n1", PodReason: "Evicted", Reason: "older than 1h"}),
			[]string{"Pod", "Node", "Result", "Reason"}, []string{"ns/p", "n1", "deleted", "Evicted: older than 1h"}},
		{"cleanup error wins, no node", cleanupItem("1", events.SeverityWarning, t0,
			events.CleanupDecision{Verb: "failed", Namespace: "ns", Pod: "p", PodReason: "Evicted", Reason: "old", Error: "timeout"}),
			[]string{"Pod", "Node", "Result", "Reason"}, []string{"ns/p", "-", "failed", "timeout"}},
		{"cleanup reason only, dry run", cleanupItem("1", events.SeverityInfo, t0,
			events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p", Node: "n", Reason: "stuck terminating", DryRun: true}),
			[]string{"Pod", "Node", "Result", "Reason"}, []string{"ns/p", "n", "deleted (dry run)", "stuck terminating"}},
		{"cleanup verb dryrun not doubled", cleanupItem("1", events.SeverityInfo, t0,
			events.CleanupDecision{Verb: "dryrun", Namespace: "ns", Pod: "p", Node: "n", Phase: "Failed", DryRun: true}),
			[]string{"Pod", "Node", "Result", "Reason"}, []string{"ns/p", "n", "dryrun", "Failed"}},
		{"cordon", cordonItem("1", events.SeverityWarning, t0,
			events.CordonDecision{Verb: "cordoned", Node: "n1", Pods: 111, MaxPods: 110, Reason: "max-reached"}),
			[]string{"Node", "Result", "Pods", "Reason"}, []string{"n1", "cordoned", "111/110", "max-reached"}},
		{"cordon error", cordonItem("1", events.SeverityCritical, t0,
			events.CordonDecision{Verb: "failed", Node: "n1", Pods: 5, MaxPods: 110, Reason: "max-reached", Error: "conflict", DryRun: true}),
			[]string{"Node", "Result", "Pods", "Reason"}, []string{"n1", "failed (dry run)", "5/110", "conflict"}},
		{"images with percent", imageItem("1", events.SeverityWarning, t0,
			events.ImageAlert{Node: "n1", ImageCount: 42, ImageBytes: 3 << 30, Percent: 81.6, Reason: "maxPercent"}),
			[]string{"Node", "Images", "Size", "Reason"}, []string{"n1", "42", "3.0 GiB (82%)", "maxPercent"}},
		{"images without percent", imageItem("1", events.SeverityInfo, t0,
			events.ImageAlert{Node: "n1", ImageCount: 1, ImageBytes: 1536, Reason: "maxBytes"}),
			[]string{"Node", "Images", "Size", "Reason"}, []string{"n1", "1", "1.5 KiB", "maxBytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := renderOne(t, Group{Route: "r", Now: t0}, []*notify.Item{tc.item})
			if strings.Join(n.Columns, "|") != strings.Join(tc.columns, "|") {
				t.Errorf("columns %v, want %v", n.Columns, tc.columns)
			}
			if len(n.Rows) != 1 || strings.Join(n.Rows[0], "|") != strings.Join(tc.want, "|") {
				t.Errorf("rows %q, want [%q]", n.Rows, tc.want)
			}
		})
	}
}

// TestRestartReportTable: every report is its own notification, rows keep
// the report's order, workload rows name the owner and pod count, the last
// reason is the first container's that has one, and the report's own
// truncation is carried as Omitted.
func TestRestartReportTable(t *testing.T) {
	byPod := events.RestartReport{ID: "r1", Tick: t0, Mode: "increase", GroupBy: "pod", Threshold: 5, PodsSeen: 40,
		Offenders: 3, Restarts: 31, Truncated: 1, Severity: events.SeverityWarning,
		Rows: []events.RestartRow{
			{Namespace: "shop", Pod: "api-1", Node: "n1", Restarts: 20, Containers: []events.Container{{Name: "side"}, {Name: "app", LastReason: "OOMKilled"}}},
			{Namespace: "shop", Pod: "api-2", Restarts: 11},
		}}
	byWorkload := events.RestartReport{ID: "r2", Tick: t0, GroupBy: "workload", Threshold: 3, PodsSeen: 9, Offenders: 1, Restarts: 12,
		Severity: events.SeverityInfo, Title: "Restarts in prod",
		Rows: []events.RestartRow{{Namespace: "db", Owner: &events.Owner{Kind: "StatefulSet", Name: "pg"}, Pods: 3, Restarts: 12,
			Containers: []events.Container{{Name: "pg", LastReason: "Error"}}}}}
	quiet := events.RestartReport{ID: "r3", Tick: t0, Threshold: 5, PodsSeen: 70}

	ns := Render(Group{Route: "r", Key: "r/restarts", Cluster: "prod", Now: t0},
		[]*notify.Item{reportItem("a", byPod), reportItem("b", byWorkload), reportItem("c", quiet)})
	if len(ns) != 3 {
		t.Fatalf("%d notifications for 3 reports, want 3", len(ns))
	}
	tests := []struct {
		n        *notify.Notification
		id       string
		rows     [][]string
		omitted  int
		summary  string
		title    string
		severity events.Severity
	}{
		{ns[0], "a", [][]string{{"shop", "api-1", "n1", "20", "OOMKilled"}, {"shop", "api-2", "-", "11", "-"}}, 1,
			"**3** pods restarted more than **5** times (increase), 31 restarts in all; 40 pods checked", "Pods restarting too often", events.SeverityWarning},
		{ns[1], "b", [][]string{{"db", "StatefulSet/pg (3 pods)", "-", "12", "Error"}}, 0,
			"**1** workloads restarted more than **3** times (total), 12 restarts in all; 9 pods checked", "Restarts in prod", events.SeverityInfo},
		{ns[2], "c", nil, 0, "No pod restarted more than **5** times; 70 pods checked", "Pods restarting too often", events.SeverityInfo},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			n := tc.n
			if len(n.Items) != 1 || n.Items[0].ID != tc.id {
				t.Fatalf("notification accounts for %v, want only %s", n.Items, tc.id)
			}
			if fmt.Sprint(n.Rows) != fmt.Sprint(tc.rows) {
				t.Errorf("rows %q, want %q", n.Rows, tc.rows)
			}
			if strings.Join(n.Columns, "|") != "Namespace|Pod|Node|Restarts|Last reason" {
				t.Errorf("columns %v", n.Columns)
			}
			if n.Omitted != tc.omitted {
				t.Errorf("omitted %d, want %d", n.Omitted, tc.omitted)
			}
			if n.Summary != tc.summary {
				t.Errorf("summary %q, want %q", n.Summary, tc.summary)
			}
			if n.Title != tc.title || n.Severity != tc.severity {
				t.Errorf("title %q severity %s, want %q %s", n.Title, n.Severity, tc.title, tc.severity)
			}
		})
	}
}

// TestTitles: the route's title (the seed's msgtitle) wins for every kind;
// without one a restart report keeps its own title, and everything else
// gets its kind's default.
func TestTitles(t *testing.T) {
	items := map[notify.Kind]*notify.Item{
		notify.KindCleanup:  cleanupItem("1", events.SeverityInfo, t0, events.CleanupDecision{Verb: "deleted", Namespace: "a", Pod: "p"}),
		notify.KindCordon:   cordonItem("2", events.SeverityInfo, t0, events.CordonDecision{Verb: "cordoned", Node: "n"}),
		notify.KindImages:   imageItem("3", events.SeverityInfo, t0, events.ImageAlert{Node: "n"}),
		notify.KindRestarts: reportItem("4", events.RestartReport{Tick: t0, Title: "Report's own title"}),
	}
	tests := []struct {
		kind       notify.Kind
		routeTitle string
		cluster    string // a fleet notifier's group: the title names it
		want       string
	}{
		{notify.KindCleanup, "", "", "Pod cleanup"},
		{notify.KindCleanup, "", "b", "Pod cleanup · cluster b"},
		{notify.KindCleanup, "删除异常 Pod", "eu_1", "删除异常 Pod · cluster eu_1"},
		{notify.KindCordon, "", "<at>x", "Node cordon · cluster ＜at＞x"},
		{notify.KindRestarts, "", "a", "Report's own title · cluster a"},
		{notify.KindRestarts, "重启报告", "a", "重启报告 · cluster a"},
		{notify.KindCleanup, "删除异常 Pod", "", "删除异常 Pod"},
		{notify.KindCordon, "", "", "Node cordon"},
		{notify.KindCordon, "cordon msgtitle", "", "cordon msgtitle"},
		{notify.KindImages, "", "", "Node image storage"},
		{notify.KindImages, "镜像告警", "", "镜像告警"},
		{notify.KindRestarts, "", "", "Report's own title"},
		{notify.KindRestarts, "重启报告", "", "重启报告"},
	}
	for _, tc := range tests {
		t.Run(string(tc.kind)+"/"+tc.routeTitle+"/"+tc.cluster, func(t *testing.T) {
			g := Group{Route: "r", Title: tc.routeTitle, Now: t0, Cluster: tc.cluster, ClusterInTitle: tc.cluster != ""}
			n := renderOne(t, g, []*notify.Item{items[tc.kind]})
			if n.Title != tc.want {
				t.Errorf("title %q, want %q", n.Title, tc.want)
			}
		})
	}
}

// TestRenderCarriesGroup: route, key, cluster and time come from the group.
func TestRenderCarriesGroup(t *testing.T) {
	g := Group{Route: "ops", Key: "ops/cordon", Cluster: "prod-eu", Now: t0}
	n := renderOne(t, g, []*notify.Item{cordonItem("1", events.SeverityInfo, t0, events.CordonDecision{Node: "n"})})
	if n.Route != g.Route || n.Key != g.Key || n.Cluster != g.Cluster || !n.Time.Equal(g.Now) {
		t.Errorf("notification %+v does not carry group %+v", n, g)
	}
	if ns := Render(g, nil); ns != nil {
		t.Errorf("Render of no items = %v, want nil", ns)
	}
}

func TestClean(t *testing.T) {
	long := strings.Repeat("é", 200)
	tests := []struct{ in, want string }{
		{"plain text", "plain text"},
		{"line1\nline2\r\tx", "line1 line2  x"},
		{`<at user_id="all">everyone</at>`, `＜at user_id="all"＞everyone＜/at＞`},
		{"6 non-terminated pods >= maxPods 6", "6 non-terminated pods ≥ maxPods 6"},
		{"free <= 10%, a < b > c", "free ≤ 10%, a ＜ b ＞ c"},
		{"denied: see [the runbook](https://evil.example/x) now", "denied: see the runbook (https://evil.example/x) now"},
		{"[a](b)[c](d) and [plain] (text)", "a (b)c (d) and [plain] (text)"},
		{"**bold** | pipe `code`", "∗∗bold∗∗ ¦ pipe 'code'"},
		{long, strings.Repeat("é", 159) + "…"},
		{strings.Repeat("x", 160), strings.Repeat("x", 160)},
	}
	for _, tc := range tests {
		t.Run(tc.in[:min(len(tc.in), 12)], func(t *testing.T) {
			if got := Clean(tc.in); got != tc.want {
				t.Errorf("Clean(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestCleanPlainAllocatesNothing: a value with nothing to replace (most
// pod, node and namespace names) is returned as it is, without a copy.
func TestCleanPlainAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = Clean("team-3/web-00042") }); n != 0 {
		t.Errorf("Clean of a plain name: %v allocations", n)
	}
}

func TestBytes(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {5 << 20, "5.0 MiB"}, {3<<30 + 512<<20, "3.5 GiB"}, {2 << 40, "2.0 TiB"},
	}
	for _, tc := range tests {
		if got := Bytes(tc.in); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A truncated image list (the kubelet's 50-image cap) gives lower bounds: the
// card must say "at least" for that node and only for it.
func TestImagesTruncatedShowLowerBounds(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	items := []*notify.Item{
		imageItem("1", events.SeverityWarning, t0, events.ImageAlert{Node: "full", ImageCount: 50, ImageBytes: 50 << 30, ImagesTruncated: true, Reason: "truncated"}),
		imageItem("2", events.SeverityWarning, t0, events.ImageAlert{Node: "exact", ImageCount: 12, ImageBytes: 60 << 30, Reason: "maxBytes"}),
	}
	n := Render(Group{Now: t0}, items)[0]
	rows := map[string][]string{}
	for _, r := range n.Rows {
		rows[r[0]] = r
	}
	if got := rows["full"]; got[1] != "≥ 50" || !strings.HasPrefix(got[2], "≥ ") {
		t.Errorf("truncated node row = %q, want lower bounds marked ≥", got)
	}
	if got := rows["exact"]; strings.Contains(got[1]+got[2], "≥") {
		t.Errorf("complete node row = %q, must not be marked as a lower bound", got)
	}
	if !strings.Contains(n.Summary, "--node-status-max-images") {
		t.Errorf("summary %q does not explain the lower bound", n.Summary)
	}
	n = Render(Group{Now: t0}, items[1:])[0]
	if strings.Contains(n.Summary, "at least") {
		t.Errorf("summary %q explains a truncation that did not happen", n.Summary)
	}
}

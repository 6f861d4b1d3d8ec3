package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/test/harness"
)

// observeQuery is one PromQL expression of the dashboard or the alert rules.
type observeQuery struct {
	where string // "dashboard: <panel>" or "rules: <alert>"
	expr  string
}

// rulesFile is the part of a Prometheus rules file the tests read.
type rulesFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

func observeRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readRules(t *testing.T, path string, spec bool) rulesFile {
	t.Helper()
	var doc struct {
		rulesFile `json:",inline"`
		Kind      string    `json:"kind"`
		Spec      rulesFile `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(mustRead(t, path)), &doc); err != nil && !spec {
		t.Fatalf("%s: %v", path, err)
	}
	if spec {
		if err := yaml.Unmarshal([]byte(mustRead(t, path)), &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc.Kind != "PrometheusRule" {
			t.Fatalf("%s: kind %q, want PrometheusRule", path, doc.Kind)
		}
		return doc.Spec
	}
	return doc.rulesFile
}

// grafanaVars are Grafana's interval variables and the dashboard's cluster
// variable, replaced before parsing.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$cluster", ".*")

// runbookBaseURL is the page the alerts' runbook_url annotations point into
// (the chart's prometheusRule.runbookBaseURL default).
const runbookBaseURL = "https://github.com/opswire/opswire/blob/main/docs/observability.md"

// observeQueries returns every expression of deploy/grafana/opswire.json and
// of deploy/prometheus/opswire-rules.yaml, checking the panels as it goes.
func observeQueries(t *testing.T) []observeQuery {
	t.Helper()
	root := observeRoot(t)
	var dash struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal([]byte(mustRead(t, filepath.Join(root, "deploy", "grafana", "opswire.json"))), &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var qs []observeQuery
	titles := map[string]bool{}
	var walk func([]map[string]any)
	walk = func(ps []map[string]any) {
		for _, p := range ps {
			title, _ := p["title"].(string)
			if p["type"] == "row" {
				if nested, ok := p["panels"].([]any); ok {
					var sub []map[string]any
					for _, n := range nested {
						sub = append(sub, n.(map[string]any))
					}
					walk(sub)
				}
				continue
			}
			if title == "" || titles[title] {
				t.Errorf("dashboard: panel %v has an empty or repeated title %q", p["id"], title)
			}
			titles[title] = true
			if d, _ := p["description"].(string); d == "" {
				t.Errorf("dashboard: panel %q has no description", title)
			}
			fc, _ := p["fieldConfig"].(map[string]any)
			defaults, _ := fc["defaults"].(map[string]any)
			if u, _ := defaults["unit"].(string); u == "" {
				t.Errorf("dashboard: panel %q has no unit", title)
			}
			targets, _ := p["targets"].([]any)
			if len(targets) == 0 {
				t.Errorf("dashboard: panel %q has no query", title)
			}
			for _, tg := range targets {
				expr, _ := tg.(map[string]any)["expr"].(string)
				qs = append(qs, observeQuery{where: "dashboard: " + title, expr: expr})
			}
		}
	}
	walk(dash.Panels)
	if len(titles) < 20 {
		t.Errorf("dashboard: %d panels, want the full set", len(titles))
	}
	for _, g := range readRules(t, filepath.Join(root, "deploy", "prometheus", "opswire-rules.yaml"), false).Groups {
		for _, r := range g.Rules {
			qs = append(qs, observeQuery{where: "rules: " + r.Alert + r.Record, expr: r.Expr})
		}
	}
	return qs
}

var unsubstituted = regexp.MustCompile(`\$\w+`)

// metricNames parses q with the Prometheus parser and returns the metric
// names its selectors name.
func metricNames(t *testing.T, p parser.Parser, q observeQuery) []string {
	t.Helper()
	if v := unsubstituted.FindString(grafanaVars.Replace(q.expr)); v != "" {
		t.Errorf("%s: unknown variable %s in %q", q.where, v, q.expr)
		return nil
	}
	e, err := p.ParseExpr(grafanaVars.Replace(q.expr))
	if err != nil {
		t.Errorf("%s: %v\n%s", q.where, err, q.expr)
		return nil
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" {
			t.Errorf("%s: a selector without a metric name in %q", q.where, q.expr)
			return nil
		}
		names = append(names, name)
		return nil
	})
	if len(names) == 0 {
		t.Errorf("%s: no metric in %q", q.where, q.expr)
	}
	return names
}

// TestObserveDashboardAndRules checks the dashboard and the alert rules
// without running anything: every expression parses, every metric is
// opswire's, the PrometheusRule holds exactly the plain rules file's groups,
// every alert has a severity, a summary and a runbook line in
// docs/observability.md, and rules-test.yaml tests it.
func TestObserveDashboardAndRules(t *testing.T) {
	root := observeRoot(t)
	p := parser.NewParser(parser.Options{})
	qs := observeQueries(t)
	for _, q := range qs {
		for _, n := range metricNames(t, p, q) {
			if !strings.HasPrefix(n, "opswire_") {
				t.Errorf("%s: %s is not an opswire metric", q.where, n)
			}
		}
	}
	plain := readRules(t, filepath.Join(root, "deploy", "prometheus", "opswire-rules.yaml"), false)
	crd := readRules(t, filepath.Join(root, "deploy", "prometheus", "prometheusrule.yaml"), true)
	if !reflect.DeepEqual(plain, crd) {
		t.Errorf("deploy/prometheus/prometheusrule.yaml spec.groups differ from opswire-rules.yaml")
	}
	tests := mustRead(t, filepath.Join(root, "deploy", "prometheus", "rules-test.yaml"))
	doc := mustRead(t, filepath.Join(root, "docs", "observability.md"))
	alerts := 0
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: no summary or description", r.Alert)
			}
			anchor := runbookBaseURL + "#" + strings.ToLower(r.Alert)
			if r.Annotations["runbook_url"] != anchor {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], anchor)
			}
			if !strings.Contains(doc, "### "+r.Alert+"\n") {
				t.Errorf("%s: no runbook section in docs/observability.md", r.Alert)
			}
			if !strings.Contains(tests, "alertname: "+r.Alert+"\n") {
				t.Errorf("%s: no unit test in rules-test.yaml", r.Alert)
			}
		}
	}
	t.Logf("%d expressions parsed, %d alerts", len(qs), alerts)
}

// TestObserveMetricsExported runs the five services against a real API
// server and NATS, drives a cordon, a cleanup, a restart report and
// notifier deliveries, scrapes /metrics of every process and checks that
// every metric the dashboard and the alert rules name is exported.
func TestObserveMetricsExported(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	want := map[string][]string{} // metric -> where
	for _, q := range observeQueries(t) {
		for _, n := range metricNames(t, p, q) {
			want[n] = append(want[n], q.where)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	var posts atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)
	urlFile := filepath.Join(t.TempDir(), "hook-url")
	if err := os.WriteFile(urlFile, []byte(hook.URL+"/hook\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: obs
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
autoCordon:
  enable: true
  maxPods: 3
  minPods: 1
  interval: 1s
  maxCordonedPercent: 100
delException:
  interval: 1s
  minAge: 0s
sendReport:
  schedule: "@hourly"
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  receivers:
  - name: audit
    type: webhook
    urlFile: %s
  routes:
  - subjects: ['ops.>']
    receivers: [audit]
`, urlFile))
	procs := map[string]*harness.Process{}
	for _, svc := range harness.Services {
		o := harness.ServiceOptions{Config: cfg, NATSURL: n.URL}
		if svc != "notifier" {
			o.Kubeconfig = cp.Kubeconfig
		}
		procs[svc] = harness.StartService(t, svc, o)
	}
	for _, svc := range harness.Services {
		procs[svc].WaitReady(t, 60*time.Second)
	}
	harness.Eventually(t, 60*time.Second, "every actor leading", func() bool {
		for _, svc := range []string{"cordon", "cleanup", "report"} {
			if procs[svc].Metric("opswire_leader") != 1 {
				return false
			}
		}
		return procs["notifier"].Metric("opswire_notifier_active") == 1
	})

	// A cordon, a cleanup deletion, a restart report: OPS events the
	// notifier delivers to the webhook.
	harness.CreateNode(t, cp.Client, harness.Node("obs-node", nil))
	for i := 0; i < 3; i++ {
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("obs-%d", i), "obs-node"))
	}
	evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("default", "obs-evicted", "obs-node")))
	nc := n.Connect(t)
	if _, err := nc.Request("ctl.obs.report.run", nil, 30*time.Second); err != nil && err != nats.ErrNoResponders {
		t.Fatalf("report request: %v", err)
	}

	var missing []string
	exported := map[string]map[string]bool{}
	scrapeAll := func() bool {
		exported = map[string]map[string]bool{}
		for svc, pr := range procs {
			for name := range scrapeNames(pr) {
				if exported[name] == nil {
					exported[name] = map[string]bool{}
				}
				exported[name][svc] = true
			}
		}
		missing = missing[:0]
		for name := range want {
			if len(exported[name]) == 0 {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		return len(missing) == 0 && posts.Load() > 0
	}
	// Polls until everything is there; reports what is missing otherwise.
	for deadline := time.Now().Add(90 * time.Second); !scrapeAll() && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
	}
	if posts.Load() == 0 {
		t.Error("the notifier delivered nothing to the webhook")
	}
	if len(missing) > 0 {
		for _, m := range missing {
			t.Errorf("%s is not exported by any service (used by %s)", m, strings.Join(want[m], "; "))
		}
	}
	for _, svc := range harness.Services {
		if v := procs[svc].Metric(`opswire_build_info{service="` + svc + `",version="dev"}`); v != 1 {
			t.Errorf("%s: opswire_build_info{service=%q} = %v, want 1", svc, svc, v)
		}
	}
	t.Logf("%d metrics named by the dashboard and the rules, %d not exported; %d webhook deliveries", len(want), len(missing), posts.Load())
}

// scrapeNames returns the metric names of the samples p exports (histograms
// as their _bucket, _sum and _count series).
func scrapeNames(p *harness.Process) map[string]bool {
	names := map[string]bool{}
	resp, err := http.Get(p.HealthURL + "/metrics")
	if err != nil {
		return names
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// TestObservePerCluster checks that the dashboard and the alert rules keep
// clusters apart (docs/observability.md, "One Prometheus, several clusters"):
// every aggregation of both groups by cluster, every one-to-one or
// many-to-one join matches on cluster, and every selector of the dashboard
// filters on its cluster variable. rules-test.yaml's two-cluster cases show
// the rules' behaviour.
func TestObservePerCluster(t *testing.T) {
	p := parser.NewParser(parser.Options{})
	for _, q := range observeQueries(t) {
		dashboard := strings.HasPrefix(q.where, "dashboard: ")
		e, err := p.ParseExpr(grafanaVars.Replace(strings.ReplaceAll(q.expr, "$cluster", "__cluster__")))
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.AggregateExpr:
				if n.Without || !slices.Contains(n.Grouping, "cluster") {
					t.Errorf("%s: %s without by (cluster, ...) in %q", q.where, n.Op, q.expr)
				}
			case *parser.BinaryExpr:
				if m := n.VectorMatching; m != nil && m.On && !slices.Contains(m.MatchingLabels, "cluster") {
					t.Errorf("%s: on (%s) without cluster in %q", q.where, strings.Join(m.MatchingLabels, ", "), q.expr)
				}
			case *parser.VectorSelector:
				if !dashboard {
					return nil
				}
				ok := false
				for _, m := range n.LabelMatchers {
					ok = ok || m.Name == "cluster" && m.Type == labels.MatchRegexp && m.Value == "__cluster__"
				}
				if !ok {
					t.Errorf(`%s: %s without {cluster=~"$cluster"} in %q`, q.where, n.Name, q.expr)
				}
			}
			return nil
		})
	}
}

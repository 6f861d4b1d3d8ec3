package locale_test

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/dingtalk"
	"github.com/opswire/opswire/services/notifier/internal/feishu"
	"github.com/opswire/opswire/services/notifier/internal/locale"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/render"
	"github.com/opswire/opswire/services/notifier/internal/slack"
	"github.com/opswire/opswire/services/notifier/internal/teams"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/services/notifier/internal/wecom"
	"github.com/opswire/opswire/shared/events"
)

// t0 is Monday 02:00 UTC: 10:00 in Asia/Shanghai.
var t0 = time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)

// cluster is what the fixtures name from the cluster (and what the actors
// wrote about it): the only ASCII words a zh-CN card may show, besides
// technical terms the Chinese Kubernetes documentation keeps.
var cluster = []string{"bj-prod-01", "payments", "shop", "api-7d9f", "worker-1", "worker-2", "Evicted", "OOMKilled",
	"Error", "CrashLoopBackOff", "pod Failed for 10m", "connection refused", "Deployment", "checkout",
	"node has 120 pods, max 110", "web-0", "kube-system"}

// technical are terms a Chinese card keeps in Latin letters.
// The zone abbreviation (CST) is what the footer names the zone by, as the
// issue asks ("2026-12-07 10:00 CST").
var technical = []string{"opswire", "CST", "Pod", "kubelet", "--node-status-max-images", "GiB", "MiB", "KiB"}

func cases() map[string][]*notify.Item {
	cl := func(id, verb, ns, pod, node, podReason, reason, errText string, sev events.Severity, dry bool) *notify.Item {
		d := events.CleanupDecision{Verb: verb, Namespace: ns, Pod: pod, Node: node, PodReason: podReason, Reason: reason, Error: errText, Severity: sev, DryRun: dry}
		return &notify.Item{ID: id, Kind: notify.KindCleanup, Severity: sev, Namespace: ns, Time: t0, Cleanup: &d}
	}
	var many []*notify.Item
	for i := range 30 {
		many = append(many, cl("m"+string(rune('a'+i%26))+string(rune('a'+i/26)), "deleted", "payments", "api-7d9f", "worker-1", "Evicted", "pod Failed for 10m", "", events.SeverityInfo, false))
	}
	cd := func(verb string, dry bool) *notify.Item {
		d := events.CordonDecision{Verb: verb, Node: "worker-2", Pods: 120, MaxPods: 110, MinPods: 90, Reason: "node has 120 pods, max 110", Severity: events.SeverityWarning, DryRun: dry}
		return &notify.Item{ID: "c-" + verb, Kind: notify.KindCordon, Severity: d.Severity, Time: t0, Cordon: &d}
	}
	img := &notify.Item{ID: "i1", Kind: notify.KindImages, Severity: events.SeverityCritical, Time: t0, Image: &events.ImageAlert{
		Node: "worker-1", Reason: "maxBytes", ImageBytes: 60 << 30, ImageCount: 50, Percent: 71, ImagesTruncated: true, Severity: events.SeverityCritical}}
	rep := func(groupBy string, offenders int) *notify.Item {
		r := events.RestartReport{ID: "r-" + groupBy, Tick: t0, Mode: "increase", GroupBy: groupBy, Threshold: 100, PodsSeen: 420,
			Offenders: offenders, Restarts: 350, Severity: events.SeverityWarning, Truncated: 3}
		if offenders > 0 {
			r.Rows = []events.RestartRow{
				{Namespace: "shop", Pod: "web-0", Node: "worker-1", Restarts: 200, Containers: []events.Container{{LastReason: "OOMKilled"}}},
				{Namespace: "payments", Owner: &events.Owner{Kind: "Deployment", Name: "checkout"}, Pods: 3, Node: "worker-2", Restarts: 150,
					Containers: []events.Container{{LastReason: "CrashLoopBackOff"}}},
			}
		}
		return &notify.Item{ID: r.ID, Kind: notify.KindRestarts, Severity: r.Severity, Time: t0, Report: &r}
	}
	return map[string][]*notify.Item{
		"cleanup one": {cl("a", "failed", "payments", "api-7d9f", "worker-1", "Evicted", "pod Failed for 10m", "connection refused", events.SeverityCritical, false)},
		"cleanup many": append(many, cl("b", "forcedeleted", "kube-system", "web-0", "", "", "pod Failed for 10m", "", events.SeverityWarning, true),
			cl("c", "skipped", "shop", "web-0", "worker-2", "OOMKilled", "pod Failed for 10m", "", events.SeverityInfo, false)),
		"cordon one":         {cd("cordoned", false)},
		"cordon many":        {cd("cordoned", true), cd("uncordoned", false), cd("failed", false)},
		"images":             {img},
		"restarts by pod":    {rep("pod", 2)},
		"restarts workloads": {rep("workload", 2)},
		"restarts none":      {rep("pod", 0)},
	}
}

// texts renders n with every receiver type and returns what a person reads
// in each: the human-readable fields, not the JSON structure.
func texts(t *testing.T, n *notify.Notification) map[string]string {
	t.Helper()
	out := map[string]string{}
	fc := feishu.BuildCard(n, "", 10)
	var b strings.Builder
	b.WriteString(fc.Header.Title.Content)
	for _, e := range fc.Elements {
		b.WriteString("\n" + e.Content)
		for _, x := range e.Elements {
			b.WriteString("\n" + x.Content)
		}
	}
	out["feishu"] = b.String()
	dm := dingtalk.Build(n, "", 10)
	out["dingtalk"] = dm.Markdown.Title + "\n" + dm.Markdown.Text
	out["wecom"] = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(wecom.Build(n, 10), " ")
	sm := slack.Build(n, 10)
	b.Reset()
	b.WriteString(sm.Text)
	for _, bl := range sm.Blocks {
		if bl.Text != nil {
			b.WriteString("\n" + bl.Text.Text)
		}
		for _, e := range bl.Elements {
			b.WriteString("\n" + e.Text)
		}
	}
	out["slack"] = b.String()
	tm := teams.Build(n, 10)
	b.Reset()
	for _, e := range tm.Attachments[0].Content.Body {
		b.WriteString("\n" + e.Text)
	}
	out["teams"] = b.String()
	wp := webhook.Build(n)
	out["webhook"] = wp.Title + "\n" + wp.Summary
	return out
}

var latin = regexp.MustCompile(`[A-Za-z][A-Za-z0-9_.-]*`)

// englishLeft returns the Latin-letter words of s that are neither from
// the cluster nor technical terms.
func englishLeft(s string) []string {
	for _, k := range append(append([]string{}, cluster...), technical...) {
		s = strings.ReplaceAll(s, k, " ")
	}
	return latin.FindAllString(s, -1)
}

var han = regexp.MustCompile(`\p{Han}`)

// TestCardsInEveryLocale renders every card type for every receiver type in
// zh-CN and en: zh-CN leaves no English word but the cluster's names and
// shows times in Asia/Shanghai; en is Latin only, in UTC, as before locales.
func TestCardsInEveryLocale(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	locales := []struct {
		l        *locale.Locale
		time     string
		fleet    bool
		severity map[events.Severity]string
	}{
		{locale.New(locale.ZhCN, shanghai), "2026-12-07 10:00:00 CST", true, map[events.Severity]string{"info": "信息", "warning": "警告", "critical": "严重"}},
		{locale.New(locale.EN, nil), "2026-12-07 02:00:00 UTC", false, map[events.Severity]string{"info": "info", "warning": "warning", "critical": "critical"}},
		{nil, "2026-12-07 02:00:00 UTC", true, map[events.Severity]string{"info": "info", "warning": "warning", "critical": "critical"}},
	}
	for name, items := range cases() {
		for _, lc := range locales {
			g := render.Group{Route: "r", Key: "r/k", Cluster: "bj-prod-01", ClusterInTitle: lc.fleet, Now: t0, Locale: lc.l}
			ns := render.Render(g, items)
			if len(ns) != 1 {
				t.Fatalf("%s: %d notifications", name, len(ns))
			}
			for typ, text := range texts(t, ns[0]) {
				where := name + " " + lc.l.Name() + " " + typ
				if typ != "webhook" {
					if !strings.Contains(text, lc.time) {
						t.Errorf("%s: no time %q in:\n%s", where, lc.time, text)
					}
					if footer := "· " + lc.severity[ns[0].Severity]; !strings.Contains(text, footer) {
						t.Errorf("%s: footer lacks the severity %q:\n%s", where, footer, text)
					}
				}
				if lc.l.Name() == locale.ZhCN {
					if left := englishLeft(text); len(left) > 0 {
						t.Errorf("%s: English words %q left in:\n%s", where, left, text)
					}
					if !han.MatchString(text) {
						t.Errorf("%s: no Chinese in:\n%s", where, text)
					}
				} else if han.MatchString(text) {
					t.Errorf("%s: Chinese in an English card:\n%s", where, text)
				}
			}
		}
	}
}

// TestEnglishIsUnchanged pins en output to the text the notifier printed
// before the catalogue, for one card of each kind.
func TestEnglishIsUnchanged(t *testing.T) {
	c := cases()
	want := map[string]string{
		"cleanup one": "**1** cleanup results: failed 1\n**Pod reasons:** Evicted 1\n**Namespaces:** payments 1\n" +
			"**Pod:** payments/api-7d9f  **Node:** worker-1\n**Why:** pod Failed for 10m\n**Error:** connection refused",
		"cordon one":         "**1** cordon decisions: cordoned 1\n**Node:** worker-2  **Pods:** 120 (cordon at 110, uncordon at 90)\n**Why:** node has 120 pods, max 110",
		"restarts workloads": "**2** workloads restarted more than **100** times (increase), 350 restarts in all; 420 pods checked",
		"restarts none":      "No pod restarted more than **100** times; 420 pods checked",
	}
	for name, w := range want {
		for _, l := range []*locale.Locale{nil, locale.New(locale.EN, time.UTC)} {
			n := render.Render(render.Group{Cluster: "bj-prod-01", Now: t0, Locale: l}, c[name])[0]
			if n.Summary != w {
				t.Errorf("%s: summary\n%s\nwant\n%s", name, n.Summary, w)
			}
		}
	}
	n := render.Render(render.Group{Cluster: "bj-prod-01", Now: t0, ClusterInTitle: true}, c["cleanup many"])[0]
	fc := feishu.BuildCard(n, "", 10)
	if got := fc.Header.Title.Content; got != "Pod cleanup · cluster bj-prod-01" {
		t.Errorf("title %q", got)
	}
	if got := fc.Elements[len(fc.Elements)-1].Elements[0].Content; got != "opswire · cluster bj-prod-01 · 2026-12-07 02:00:00 UTC · warning" {
		t.Errorf("footer %q", got)
	}
	if got := fc.Elements[2].Content; !strings.HasSuffix(got, "\n…and 22 more") || !strings.HasPrefix(got, "**Pod · Node · Result · Reason**\n") {
		t.Errorf("table %q", got)
	}
}

// TestDefaultTitlesAreTranslated: the configuration's English default titles
// (sendReport.msgtitle, imageAlert.msgtitle) read in the card's language;
// a title the user wrote is kept.
func TestDefaultTitlesAreTranslated(t *testing.T) {
	zh := locale.New(locale.ZhCN, nil)
	for in, want := range map[string]string{"Pods restarting too often": "Pod 重启过多", "Node image storage": "节点镜像存储",
		"pod重启次数过多": "pod重启次数过多", "My 100% title": "My 100% title"} {
		if got := zh.Title(in); got != want {
			t.Errorf("Title(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWebhookStaysMachineReadable: the generic webhook's human-readable
// fields follow the locale; its time stays an RFC 3339 instant in UTC.
func TestWebhookStaysMachineReadable(t *testing.T) {
	n := render.Render(render.Group{Cluster: "bj-prod-01", Now: t0, Locale: locale.New(locale.ZhCN, time.FixedZone("CST", 8*3600))}, cases()["images"])[0]
	b, _ := json.Marshal(webhook.Build(n))
	if !strings.Contains(string(b), `"time":"2026-12-07T02:00:00Z"`) || !strings.Contains(string(b), `"title":"节点镜像存储"`) {
		t.Errorf("payload %s", b)
	}
}

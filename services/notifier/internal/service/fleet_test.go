package service

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/dingtalktest"
	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/render"
	"github.com/opswire/opswire/services/notifier/slacktest"
	"github.com/opswire/opswire/services/notifier/teamstest"
	"github.com/opswire/opswire/services/notifier/wecomtest"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// TestEveryReceiverNamesTheCluster: a fleet notifier's card of cluster
// "eu-2" names it in the title and the footer with every receiver type, as
// its test server records what the service would show.
func TestEveryReceiverNamesTheCluster(t *testing.T) {
	fs, ds, ws, ss, ts := feishutest.NewServer(), dingtalktest.NewServer(), wecomtest.NewServer(), slacktest.NewServer(), teamstest.NewServer()
	for _, c := range []interface{ Close() }{fs, ds, ws, ss, ts} {
		t.Cleanup(c.Close)
	}
	urls := map[string]string{
		"f": fs.AddBot("tok-f", feishutest.Bot{}),
		"d": ds.AddRobot("tok-d", dingtalktest.Robot{}),
		"w": ws.AddRobot("key-w"),
		"s": ss.AddHook("T1/B1/x"),
		"t": ts.AddWorkflow("wf1", "sig1"),
	}
	doc := "notifier:\n  clusters: ['*']\n  receivers:\n"
	for name, typ := range map[string]string{"f": "feishu", "d": "dingtalk", "w": "wecom", "s": "slack", "t": "teams"} {
		doc += fmt.Sprintf("  - {name: %s, type: %s, url: '%s'}\n", name, typ, urls[name])
	}
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := BuildReceivers(cfg.NotifierReceivers(), cfg.Notifier, nil, &ratelimit.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	items := []*notify.Item{{ID: "1", Kind: notify.KindCleanup, Cluster: "eu-2", Severity: events.SeverityWarning, Namespace: "ns", Time: time.Now(),
		Cleanup: &events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p", PodReason: "Evicted"}}}
	ns := render.Render(render.Group{Route: "r", Key: "r/eu-2/cleanup", Cluster: "eu-2", ClusterInTitle: true, Now: time.Now()}, items)
	if len(ns) != 1 {
		t.Fatalf("%d notifications", len(ns))
	}
	for _, r := range rs {
		if _, err := r.Sink.Send(context.Background(), ns[0]); err != nil {
			t.Fatalf("receiver %s: %v", r.Name, err)
		}
	}
	const title, footer = "Pod cleanup · cluster eu-2", "opswire · cluster eu-2 ·"
	tests := []struct {
		typ          string
		title, whole string // the title as shown, and every text of the message
	}{
		{"feishu", fs.Cards("tok-f")[0].Title(), fs.Cards("tok-f")[0].Text()},
		{"dingtalk", ds.Messages("tok-d")[0].Title, ds.Messages("tok-d")[0].Text},
		{"wecom", firstLine(ws.Messages("key-w")[0].Content), ws.Messages("key-w")[0].Content},
		{"slack", ss.Messages("T1/B1/x")[0].Header, ss.Messages("T1/B1/x")[0].All()},
		{"teams", ts.Cards("wf1")[0].Texts[0], ts.Cards("wf1")[0].Text()},
	}
	for _, tc := range tests {
		if !strings.Contains(tc.title, title) {
			t.Errorf("%s: title %q does not name the cluster", tc.typ, tc.title)
		}
		if !strings.Contains(tc.whole, footer) {
			t.Errorf("%s: no footer naming the cluster in:\n%s", tc.typ, tc.whole)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

package render_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/feishu"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/render"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// burst is n cleanup results; every tenth is a critical failure with a long
// error, the rest info deletions, so the failures are not the first events.
func burst(n int) []*notify.Item {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	out := make([]*notify.Item, 0, n)
	for i := 0; i < n; i++ {
		d := events.CleanupDecision{Verb: "deleted", Namespace: fmt.Sprintf("team-%d", i%7), Pod: fmt.Sprintf("worker-with-a-long-name-%05d", i),
			Node: "node-0001.example.internal", PodReason: "Evicted", Reason: "The node was low on resource: memory.", Severity: events.SeverityInfo}
		if i%10 == 9 {
			d.Verb, d.Severity, d.Error = "failed", events.SeverityCritical, "pods is forbidden: "+strings.Repeat("x", 100)
		}
		out = append(out, &notify.Item{ID: fmt.Sprint(i), Kind: notify.KindCleanup, Severity: d.Severity, Namespace: d.Namespace,
			Time: t0.Add(time.Duration(i) * time.Second), Cleanup: &d})
	}
	return out
}

// distinctReasons is burst(n) with a pod reason of its own per event, as
// admission webhooks and node conditions write them (long, with names).
func distinctReasons(n int) []*notify.Item {
	out := burst(n)
	for i, it := range out {
		it.Cleanup.PodReason = fmt.Sprintf("UnexpectedAdmissionError-%05d-%s", i, strings.Repeat("r", 80))
	}
	return out
}

var andMore = regexp.MustCompile(`…and (\d+) more`)

// TestCardsFitTheBodyBudget renders groups and sends them, through the real
// Feishu sink, to the Feishu-compatible server: every body stays within the
// 20 KB budget and is accepted, the rows shown plus "…and N more" account
// for every row (and a report's own truncation), and the rows that survive
// the cut are the most severe.
func TestCardsFitTheBodyBudget(t *testing.T) {
	tests := []struct {
		name      string
		items     []*notify.Item
		topRows   int
		bodyLimit int
		secret    string
		wantShown int // -1: whatever fits, but fewer than all
		wantMore  int // -1: all rows not shown
	}{
		{name: "500 results cut by size", items: burst(500), topRows: 0, bodyLimit: 20000, secret: "s3cret", wantShown: -1, wantMore: -1},
		{name: "500 results cut by topRows", items: burst(500), topRows: 10, bodyLimit: 20000, wantShown: 10, wantMore: 490},
		{name: "small budget", items: burst(50), topRows: 0, bodyLimit: 3000, wantShown: -1, wantMore: -1},
		{name: "few rows all shown", items: burst(3), topRows: 10, bodyLimit: 20000, wantShown: 3, wantMore: 0},
		{name: "500 results with 500 pod reasons", items: distinctReasons(500), topRows: 10, bodyLimit: 20000, wantShown: 10, wantMore: 490},
		{name: "report keeps its own truncation", items: []*notify.Item{{ID: "r", Kind: notify.KindRestarts, Report: &events.RestartReport{
			Threshold: 5, Offenders: 8, Truncated: 5, Rows: []events.RestartRow{
				{Namespace: "a", Pod: "p1", Restarts: 30}, {Namespace: "a", Pod: "p2", Restarts: 20}, {Namespace: "a", Pod: "p3", Restarts: 10}}}}},
			topRows: 2, bodyLimit: 20000, wantShown: 2, wantMore: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := feishutest.NewServer()
			t.Cleanup(srv.Close)
			url := srv.AddBot("tok", feishutest.Bot{Secret: tc.secret})
			sink, err := feishu.New(feishu.Options{URL: config.Secret(url), Secret: config.Secret(tc.secret), BodyLimit: tc.bodyLimit, MaxRows: tc.topRows})
			if err != nil {
				t.Fatal(err)
			}
			ns := render.Render(render.Group{Route: "r", Key: "r/k", Cluster: "prod", Now: time.Now()}, tc.items)
			if len(ns) != 1 {
				t.Fatalf("%d notifications, want 1", len(ns))
			}
			n := ns[0]
			if _, err := sink.Send(context.Background(), n); err != nil {
				t.Fatalf("send: %v", err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Code != feishutest.CodeOK {
				t.Fatalf("requests %+v, want one accepted", reqs)
			}
			if reqs[0].Size > tc.bodyLimit {
				t.Errorf("body %d bytes, over the %d budget", reqs[0].Size, tc.bodyLimit)
			}
			table := reqs[0].Card.Elements[2].Content
			lines := strings.Split(table, "\n")[1:] // below the bold header line
			more := 0
			if m := andMore.FindStringSubmatch(lines[len(lines)-1]); m != nil {
				more, _ = strconv.Atoi(m[1])
				lines = lines[:len(lines)-1]
			}
			shown := len(lines)
			if tc.wantShown >= 0 && shown != tc.wantShown {
				t.Errorf("%d rows shown, want %d", shown, tc.wantShown)
			}
			if tc.wantShown < 0 && (shown == 0 || shown >= len(n.Rows)) {
				t.Errorf("%d of %d rows shown, want a cut", shown, len(n.Rows))
			}
			wantMore := tc.wantMore
			if wantMore < 0 {
				wantMore = len(n.Rows) - shown
			}
			if more != wantMore {
				t.Errorf("\"…and %d more\", want %d (shown %d of %d rows, %d omitted upstream)", more, wantMore, shown, len(n.Rows), n.Omitted)
			}
			// Rows are most severe first: if any info row is shown, every
			// critical row is shown before it.
			seenInfo := false
			for _, l := range lines {
				critical := strings.Contains(l, "· failed ·")
				if critical && seenInfo {
					t.Fatalf("critical row after an info row:\n%s", table)
				}
				seenInfo = seenInfo || !critical
			}
			if !strings.Contains(n.Summary, fmt.Sprintf("**%d** cleanup results", len(tc.items))) && tc.items[0].Kind == notify.KindCleanup {
				t.Errorf("summary does not account for all %d events: %s", len(tc.items), n.Summary)
			}
		})
	}
}

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// downableHook is a generic-webhook receiver that records every event id in
// arrival order and can be switched off (503) like the Feishu test server.
type downableHook struct {
	*httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	ids  []string
}

func newDownableHook(t *testing.T) *downableHook {
	h := &downableHook{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if h.down.Load() {
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return
		}
		var p struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &p); err != nil {
			http.Error(rw, "bad payload", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		for _, e := range p.Events {
			h.ids = append(h.ids, e.ID)
		}
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *downableHook) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.ids...)
}

// TestFaultFeishuDown keeps the receivers (a Feishu bot and a JSON webhook)
// down while the real cleanup actor keeps deleting evicted pods, then brings
// them back: every result is delivered afterwards, once, and the webhook gets
// them in OPS order. The outage is the 60 s (OPSWIRE_FAULT_OUTAGE=20s
// runs a shorter one while developing): with retryMax 2 s both are retry
// rounds at the cap, far inside giveUpAfter, and the messages are held with
// progress acks, so the length changes the number of rounds only.
func TestFaultFeishuDown(t *testing.T) {
	outage := 60 * time.Second
	if v := os.Getenv("OPSWIRE_FAULT_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OPSWIRE_FAULT_OUTAGE: %v", err)
		}
		outage = d
	}
	const total = 30
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	bots := feishutest.NewServer()
	t.Cleanup(bots.Close)
	bot := bots.AddBot("fault-bot-token-6b1", feishutest.Bot{})
	hook := newDownableHook(t)
	urlFile := filepath.Join(t.TempDir(), "hook-url")
	if err := os.WriteFile(urlFile, []byte(hook.URL+"/hooks/fault\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "apps")
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: e2e
controller:
  LeaderElect: false
delException:
  interval: 1s
  minAge: 0s
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  giveUpAfter: 10m
  topRows: 100
  receivers:
  - name: ops-feishu
    url: "%s"
  - name: audit
    type: webhook
    urlFile: %s
  routes:
  - subjects: ['ops.*.cleanup.>']
    receivers: [ops-feishu, audit]
`, bot, urlFile))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.deleted.>")
	var notifier *harness.Process
	for _, svc := range []string{"cleanup", "notifier"} {
		o := harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: svc + "-a"}
		if svc != "notifier" {
			o.Kubeconfig = cp.Kubeconfig
		}
		p := harness.StartService(t, svc, o)
		p.WaitReady(t, 60*time.Second)
		if svc == "notifier" {
			notifier = p
		}
	}
	// The stuck consumers are visible: opswire_notifier_consumer_backlog
	// (not pulled + held unacked, read every max(ackWait, 1 s)) per receiver.
	backlog := func(receiver string) float64 {
		return notifier.Metric(`opswire_notifier_consumer_backlog{receiver="` + receiver + `"}`)
	}
	receivers := []string{"ops-feishu", "audit"}

	bots.SetDown(true)
	hook.down.Store(true)
	down := time.Now()
	// Actions keep coming through the outage: a pod evicted every outage/total.
	for i := range total {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", fmt.Sprintf("ev-%02d", i), "worker-1")))
		time.Sleep(time.Until(down.Add(time.Duration(i+1) * outage / total)))
	}
	harness.Eventually(t, 30*time.Second, "all deletions in OPS", func() bool { return ops.Count(func(harness.Msg) bool { return true }) >= total })
	peak := map[string]float64{}
	harness.Eventually(t, 30*time.Second, "the backlog of both receivers' consumers to show every held result", func() bool {
		for _, r := range receivers {
			peak[r] = backlog(r)
		}
		return peak["ops-feishu"] >= total && peak["audit"] >= total
	})
	refused := bots.Count(-1)
	bots.SetDown(false)
	hook.down.Store(false)
	up := time.Now()
	harness.Eventually(t, 60*time.Second, "every result on both receivers", func() bool {
		return len(hook.received()) >= total && harness.CardResults(t, bots.Cards("fault-bot-token-6b1")) >= total
	})
	delivered := time.Since(up)
	waitSettled(t, n.JS, 30*time.Second)
	harness.Eventually(t, 30*time.Second, "the backlog to fall to 0 after the receivers came back", func() bool {
		return backlog("ops-feishu") == 0 && backlog("audit") == 0
	})
	t.Logf("consumer backlog during the outage: ops-feishu %v, audit %v (for %d results); 0 after delivery",
		peak["ops-feishu"], peak["audit"], total)

	var want []string // OPS order
	for _, m := range ops.All() {
		want = append(want, m.ID)
	}
	got := hook.received()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	dup := 0
	for _, c := range seen {
		dup += c - 1
	}
	cards := harness.CardResults(t, bots.Cards("fault-bot-token-6b1"))
	t.Logf("receivers down %v (%d Feishu attempts refused); %d results delivered %v after they came back: webhook %d events (%d duplicates), Feishu %d cards for %d events",
		up.Sub(down).Round(time.Millisecond), refused, total, delivered.Round(time.Millisecond), len(got), dup, len(bots.Cards("fault-bot-token-6b1")), cards)
	if len(seen) != total || dup != 0 || cards != total {
		t.Fatalf("webhook: %d distinct, %d duplicates; Feishu cards count %d events; want %d, 0, %d", len(seen), dup, cards, total, total)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("webhook order differs from OPS at %d: got %s, OPS has %s", i, got[i], want[i])
		}
	}
	// Feishu, counted at the bot by pod name (topRows 100: every row is on
	// its card): each pod on exactly one card, and the cards of the group
	// (one route, one kind) in OPS order — each card's pods come after the
	// previous card's. Rows within a card are by severity, then newest.
	opsIndex := map[string]int{}
	for i, m := range ops.All() {
		d := decision(t, m)
		opsIndex[d.Namespace+"/"+d.Pod] = i
	}
	onCards := map[string]int{}
	last := -1
	for ci, pods := range cardPods(t, bots.Cards("fault-bot-token-6b1")) {
		lo, hi := len(opsIndex), -1
		for _, pod := range pods {
			onCards[pod]++
			i, ok := opsIndex[pod]
			if !ok {
				t.Fatalf("card %d lists %s, which is not in OPS", ci, pod)
			}
			lo, hi = min(lo, i), max(hi, i)
		}
		if lo <= last {
			t.Errorf("Feishu card %d has OPS results %d..%d, the card before it reached %d: not in OPS order", ci, lo, hi, last)
		}
		last = max(last, hi)
	}
	for pod := range opsIndex {
		if onCards[pod] != 1 {
			t.Errorf("Feishu: %s on %d cards, want 1", pod, onCards[pod])
		}
	}
	if v := bots.RateViolations(); v != 0 {
		t.Errorf("%d Feishu rate-limit violations", v)
	}
}

// cardPods returns the pods each accepted card lists in its table, card by
// card in the order the bot accepted them.
func cardPods(t *testing.T, cards []*feishutest.Card) [][]string {
	t.Helper()
	var out [][]string
	for _, c := range cards {
		var pods []string
		for _, e := range c.Elements {
			if e.Tag != "markdown" || !strings.HasPrefix(e.Content, "**Pod · ") {
				continue
			}
			for _, line := range strings.Split(e.Content, "\n")[1:] {
				if strings.HasPrefix(line, "…and ") {
					t.Fatalf("card lists only some of its rows (%s); raise topRows", line)
				}
				pod, _, _ := strings.Cut(line, " · ")
				pods = append(pods, pod)
			}
		}
		if len(pods) == 0 {
			t.Fatalf("card without a pod table:\n%s", c.Text())
		}
		out = append(out, pods)
	}
	return out
}

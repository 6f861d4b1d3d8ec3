package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/dingtalktest"
	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/slacktest"
	"github.com/opswire/opswire/services/notifier/teamstest"
	"github.com/opswire/opswire/services/notifier/wecomtest"
	"github.com/opswire/opswire/test/harness"
)

var chatCount = regexp.MustCompile(`\*{1,2}(\d+)\*{1,2} cleanup results`)

// chatMessage is one accepted message at any chat test server, as the
// accounting needs it.
type chatMessage struct {
	text       string
	rows, more int
}

// account sums the "N cleanup results" of messages and checks that each
// message lists or counts every one of its N events (rows + "…and N more").
func account(t *testing.T, receiver string, msgs []chatMessage) int {
	t.Helper()
	total := 0
	for _, m := range msgs {
		x := chatCount.FindStringSubmatch(m.text)
		if x == nil {
			t.Errorf("%s: message without a count:\n%s", receiver, m.text)
			continue
		}
		n, _ := strconv.Atoi(x[1])
		if m.rows+m.more != n {
			t.Errorf("%s: message says %d results but lists %d rows and %d more", receiver, n, m.rows, m.more)
		}
		total += n
	}
	return total
}

// TestNotifierFiveReceiverTypes: a cleanup burst (500 pods in 50 waves)
// fans out through one route to a Feishu, a DingTalk, a WeCom, a Slack and a
// Teams test receiver. Each accepts only valid messages (signed where the
// service signs), none is refused for its rate limits or size, nothing
// mentions anyone, and each receiver's messages account for every pod.
func TestNotifierFiveReceiverTypes(t *testing.T) {
	const pods = 500
	n := harness.StartNATS(t)
	fs, dt, wc, sl, tm := feishutest.NewServer(), dingtalktest.NewServer(), wecomtest.NewServer(), slacktest.NewServer(), teamstest.NewServer()
	for _, c := range []func(){fs.Close, dt.Close, wc.Close, sl.Close, tm.Close} {
		t.Cleanup(c)
	}
	const (
		fsTok, fsSecret = "fs-token-e2e-41ab", "fs-secret-e2e-77"
		dtTok, dtSecret = "dt-token-e2e-93cd", "SECdt-secret-e2e-5e"
		wcKey           = "wc-key-e2e-0f12"
		slHook          = "T0E2E/B0E2E/sl-hook-e2e-8a8a"
		tmFlow, tmSig   = "tm-flow-e2e-6b6b", "tm-sig-e2e-2c2c"
	)
	urls := []string{
		fs.AddBot(fsTok, feishutest.Bot{Secret: fsSecret}),
		dt.AddRobot(dtTok, dingtalktest.Robot{Secret: dtSecret, Keywords: []string{"opswire"}}),
		wc.AddRobot(wcKey),
		sl.AddHook(slHook),
		tm.AddWorkflow(tmFlow, tmSig),
	}
	env := []string{"E2E_FS_URL=" + urls[0], "E2E_FS_SECRET=" + fsSecret, "E2E_DT_URL=" + urls[1], "E2E_DT_SECRET=" + dtSecret,
		"E2E_WC_URL=" + urls[2], "E2E_SL_URL=" + urls[3], "E2E_TM_URL=" + urls[4]}
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: %s
notifier:
  groupWait: 200ms
  groupInterval: 500ms
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  giveUpAfter: 10m
  receivers:
  - {name: c-feishu, type: feishu, urlEnv: E2E_FS_URL, secretEnv: E2E_FS_SECRET}
  - {name: c-dingtalk, type: dingtalk, urlEnv: E2E_DT_URL, secretEnv: E2E_DT_SECRET, keyword: opswire}
  - {name: c-wecom, type: wecom, urlEnv: E2E_WC_URL}
  - {name: c-slack, type: slack, urlEnv: E2E_SL_URL}
  - {name: c-teams, type: teams, urlEnv: E2E_TM_URL}
  routes:
  - subjects: ['ops.*.cleanup.>']
    receivers: [c-feishu, c-dingtalk, c-wecom, c-slack, c-teams]
`, notifierCluster))
	p := harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "notifier-a", Env: env})
	p.WaitReady(t, 30*time.Second)

	start := time.Now()
	// Waves paced by a ticker make more messages than one burst, so the
	// per-type rate limits (Slack 1/s, DingTalk and WeCom 20/min) are met.
	tick := time.NewTicker(300 * time.Millisecond)
	for w := 0; w < 50; w++ {
		publishCleanups(t, n.JS, w*10, 10)
		<-tick.C
	}
	tick.Stop()
	collect := func() map[string][]chatMessage {
		out := map[string][]chatMessage{}
		for _, c := range fs.Cards(fsTok) {
			text := c.Text()
			rows := 0
			for _, l := range strings.Split(text, "\n") {
				if strings.Count(l, " · ") == 3 && !strings.HasPrefix(l, "**") && !strings.HasPrefix(l, "opswire · ") {
					rows++
				}
			}
			more := 0
			if x := regexp.MustCompile(`…and (\d+) more`).FindStringSubmatch(text); x != nil {
				more, _ = strconv.Atoi(x[1])
			}
			out["feishu"] = append(out["feishu"], chatMessage{text, rows, more})
		}
		for _, m := range dt.Messages(dtTok) {
			r, mo := m.Table()
			out["dingtalk"] = append(out["dingtalk"], chatMessage{m.Title + "\n" + m.Text, r, mo})
		}
		for _, m := range wc.Messages(wcKey) {
			r, mo := m.Table()
			out["wecom"] = append(out["wecom"], chatMessage{m.Content, r, mo})
		}
		for _, m := range sl.Messages(slHook) {
			r, mo := m.Table()
			out["slack"] = append(out["slack"], chatMessage{m.All(), r, mo})
		}
		for _, c := range tm.Cards(tmFlow) {
			r, mo := c.Table()
			out["teams"] = append(out["teams"], chatMessage{c.Text(), r, mo})
		}
		return out
	}
	sum := func(msgs []chatMessage) int {
		total := 0
		for _, m := range msgs {
			if x := chatCount.FindStringSubmatch(m.text); x != nil {
				v, _ := strconv.Atoi(x[1])
				total += v
			}
		}
		return total
	}
	types := []string{"feishu", "dingtalk", "wecom", "slack", "teams"}
	harness.Eventually(t, 150*time.Second, "every receiver to account for 500 pods", func() bool {
		got := collect()
		for _, ty := range types {
			if sum(got[ty]) < pods {
				return false
			}
		}
		return true
	})
	waitSettled(t, n.JS, 30*time.Second)
	got := collect()
	for _, ty := range types {
		if total := account(t, ty, got[ty]); total != pods {
			t.Errorf("%s: messages account for %d pods, want %d", ty, total, pods)
		}
		for _, m := range got[ty] {
			if !strings.Contains(m.text, "cluster "+notifierCluster) || !strings.Contains(m.text, "Pod cleanup") {
				t.Errorf("%s: message lacks title or cluster:\n%s", ty, m.text)
			}
		}
		v := p.Metric(fmt.Sprintf(`opswire_notifier_events_total{outcome="delivered",receiver="c-%s"}`, ty))
		t.Logf("%s: %d messages for %d pods (delivered metric %v) after %s", ty, len(got[ty]), pods, v, time.Since(start).Round(time.Second))
		if v != pods {
			t.Errorf("%s: delivered metric %v, want %d", ty, v, pods)
		}
	}
	// More than 20 DingTalk messages: the 21st waited for the minute window.
	if ms := dt.Requests(); len(ms) > dingtalktest.PerMinute {
		first, late := ms[0].Time, ms[dingtalktest.PerMinute].Time
		if late.Sub(first) < time.Minute {
			t.Errorf("dingtalk: message %d arrived %s after the first", dingtalktest.PerMinute+1, late.Sub(first))
		}
	} else {
		t.Logf("dingtalk: only %d messages; its 20/min limit was not reached", len(ms))
	}
	// Limits, signatures and mentions, counted at the servers.
	if v := fs.RateViolations(); v != 0 {
		t.Errorf("feishu: %d rate-limit refusals", v)
	}
	for _, r := range dt.Requests() {
		if !r.Signed || r.Code != dingtalktest.CodeOK {
			t.Errorf("dingtalk: request signed=%v answered %d %q", r.Signed, r.Code, r.Msg)
		}
		if r.Size > dingtalktest.BodyLimit {
			t.Errorf("dingtalk: %d-byte request", r.Size)
		}
	}
	for _, m := range dt.Messages(dtTok) {
		if m.IsAtAll || len(m.Mobiles) > 0 {
			t.Errorf("dingtalk: message mentions someone")
		}
	}
	if c := wc.Count(wecomtest.CodeFreq) + wc.Count(wecomtest.CodeInvalidParam); c != 0 {
		t.Errorf("wecom: %d requests refused for rate or size", c)
	}
	for _, m := range wc.Messages(wcKey) {
		if m.Mentions {
			t.Errorf("wecom: message mentions someone:\n%s", m.Content)
		}
	}
	if c := sl.Count("rate_limited") + sl.Count("invalid_blocks"); c != 0 {
		t.Errorf("slack: %d requests refused (rate_limited or invalid_blocks)", c)
	}
	for _, m := range sl.Messages(slHook) {
		if m.Mentions {
			t.Errorf("slack: message mentions someone:\n%s", m.All())
		}
	}
	if c := tm.Count(429); c != 0 {
		t.Errorf("teams: %d requests throttled", c)
	}
	if d := tm.Dropped(); len(d) != 0 {
		t.Errorf("teams would drop %d cards: %v", len(d), d)
	}
	assertNoSecrets(t, p.Logs(), fsTok, fsSecret, dtTok, dtSecret, wcKey, slHook, tmFlow, tmSig)
}

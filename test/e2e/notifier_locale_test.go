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

var (
	zhCount = regexp.MustCompile(`\*{1,2}(\d+)\*{1,2} 条清理结果`)
	// zhFromCluster is what publishCleanups puts on a card from the
	// cluster (and the cleanup actor's reason, which the actor writes);
	// zhTechnical the terms a Chinese card keeps (the zone's abbreviation,
	// "Pod" as the Chinese Kubernetes documentation writes it).
	zhFromCluster = regexp.MustCompile(`team-\d+(/web-\d+)?|web-\d+|node-\d+|Evicted|NodeLost|OOMKilled|failed pod older than minAge|\be2e\b`)
	zhTechnical   = regexp.MustCompile(`opswire|\bPod\b|\bCST\b`)
	// zhTags are markup no one reads: WeCom's <font color=…> and the
	// Feishu fake's "[orange] " header colour before the title.
	zhTags  = regexp.MustCompile(`<[^>]*>|(?m)^\[(?:red|orange|blue)\] `)
	zhLatin = regexp.MustCompile(`[A-Za-z]+`)
	zhTime  = regexp.MustCompile(`(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) CST`)
)

// TestNotifierFiveReceiverTypesInChinese runs the notifier on the seed's
// titles (Chinese msgtitle, no notifier.locale) with TZ=Asia/Shanghai: every
// card at all five chat types' fake receivers is Chinese but for what the
// cluster named, shows the time in Asia/Shanghai (CST), and still accounts
// for every pod ("…另有 N 行"); a receiver with locale: en gets English.
func TestNotifierFiveReceiverTypesInChinese(t *testing.T) {
	const pods = 40
	n := harness.StartNATS(t)
	fs, dt, wc, sl, tm := feishutest.NewServer(), dingtalktest.NewServer(), wecomtest.NewServer(), slacktest.NewServer(), teamstest.NewServer()
	for _, c := range []func(){fs.Close, dt.Close, wc.Close, sl.Close, tm.Close} {
		t.Cleanup(c)
	}
	const fsTok, dtTok, wcKey, slHook, slHookEN, tmFlow = "fs-zh-1", "dt-zh-1", "wc-zh-1", "T0ZH/B0ZH/sl-zh-1", "T0ZH/B0ZH/sl-en-1", "tm-zh-1"
	env := []string{"TZ=Asia/Shanghai", "E2E_FS_URL=" + fs.AddBot(fsTok, feishutest.Bot{}),
		"E2E_DT_URL=" + dt.AddRobot(dtTok, dingtalktest.Robot{Keywords: []string{"opswire"}}), "E2E_WC_URL=" + wc.AddRobot(wcKey),
		"E2E_SL_URL=" + sl.AddHook(slHook), "E2E_SLEN_URL=" + sl.AddHook(slHookEN), "E2E_TM_URL=" + tm.AddWorkflow(tmFlow, "tm-sig-zh")}
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: %s
sendReport:
  msgtitle: "pod重启次数过多"
delException:
  msgtitle: "删除异常状态 Pod"
notifier:
  groupWait: 200ms
  groupInterval: 500ms
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  receivers:
  - {name: c-feishu, type: feishu, urlEnv: E2E_FS_URL}
  - {name: c-dingtalk, type: dingtalk, urlEnv: E2E_DT_URL, keyword: opswire}
  - {name: c-wecom, type: wecom, urlEnv: E2E_WC_URL}
  - {name: c-slack, type: slack, urlEnv: E2E_SL_URL}
  - {name: c-teams, type: teams, urlEnv: E2E_TM_URL}
  - {name: c-slack-en, type: slack, urlEnv: E2E_SLEN_URL, locale: en}
  routes:
  - subjects: ['ops.*.cleanup.>']
    receivers: [c-feishu, c-dingtalk, c-wecom, c-slack, c-teams, c-slack-en]
`, notifierCluster))
	p := harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "notifier-zh", Env: env})
	p.WaitReady(t, 30*time.Second)
	start := time.Now()
	for w := 0; w < pods/10; w++ {
		publishCleanups(t, n.JS, w*10, 10)
		time.Sleep(700 * time.Millisecond)
	}
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
			if x := regexp.MustCompile(`…另有 (\d+) 行`).FindStringSubmatch(text); x != nil {
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
		for _, m := range sl.Messages(slHookEN) {
			r, mo := m.Table()
			out["slack-en"] = append(out["slack-en"], chatMessage{m.All(), r, mo})
		}
		return out
	}
	count := func(re *regexp.Regexp, msgs []chatMessage) int {
		total := 0
		for _, m := range msgs {
			if x := re.FindStringSubmatch(m.text); x != nil {
				v, _ := strconv.Atoi(x[1])
				total += v
			}
		}
		return total
	}
	types := []string{"feishu", "dingtalk", "wecom", "slack", "teams"}
	harness.Eventually(t, 90*time.Second, "every receiver to account for every pod", func() bool {
		got := collect()
		for _, ty := range types {
			if count(zhCount, got[ty]) < pods {
				return false
			}
		}
		return count(chatCount, got["slack-en"]) >= pods
	})
	waitSettled(t, n.JS, 30*time.Second)
	got := collect()
	for _, ty := range types {
		if len(got[ty]) == 0 {
			t.Errorf("%s: no message", ty)
		}
		for _, m := range got[ty] {
			x := zhCount.FindStringSubmatch(m.text)
			if x == nil {
				t.Errorf("%s: no Chinese count in:\n%s", ty, m.text)
				continue
			}
			if v, _ := strconv.Atoi(x[1]); m.rows+m.more != v {
				t.Errorf("%s: message says %d results but lists %d rows and %d more:\n%s", ty, v, m.rows, m.more, m.text)
			}
			for _, want := range []string{"Pod 清理", "集群 " + notifierCluster, "命名空间", "已删除"} {
				if !strings.Contains(m.text, want) {
					t.Errorf("%s: message lacks %q:\n%s", ty, want, m.text)
				}
			}
			left := zhTechnical.ReplaceAllString(zhFromCluster.ReplaceAllString(zhTags.ReplaceAllString(m.text, " "), " "), " ")
			if words := zhLatin.FindAllString(left, -1); len(words) > 0 {
				t.Errorf("%s: English words %q on a zh-CN card:\n%s", ty, words, m.text)
			}
			checkShanghaiTime(t, ty, m.text, start)
		}
	}
	if len(got["slack-en"]) == 0 {
		t.Error("slack-en: no message")
	}
	for _, m := range got["slack-en"] {
		if !strings.Contains(m.text, "Pod cleanup") || !strings.Contains(m.text, "cluster "+notifierCluster) || regexp.MustCompile(`\p{Han}`).MatchString(m.text) {
			t.Errorf("slack-en: message is not the English card:\n%s", m.text)
		}
		checkShanghaiTime(t, "slack-en", m.text, start)
	}
	for _, ty := range []string{"feishu", "dingtalk", "wecom", "slack", "teams", "slack-en"} {
		t.Logf("%s: %d messages, first:\n%s", ty, len(got[ty]), first(got[ty]))
	}
}

// checkShanghaiTime: the footer's time is now in Asia/Shanghai, named CST.
func checkShanghaiTime(t *testing.T, ty, text string, start time.Time) {
	t.Helper()
	x := zhTime.FindStringSubmatch(text)
	if x == nil {
		t.Errorf("%s: no CST time in:\n%s", ty, text)
		return
	}
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.ParseInLocation(time.DateTime, x[1], sh)
	if err != nil || at.Before(start.Add(-5*time.Second)) || at.After(time.Now().Add(5*time.Second)) {
		t.Errorf("%s: footer time %s (read %v, %v) is not the send time in Asia/Shanghai", ty, x[1], at, err)
	}
}

func first(ms []chatMessage) string {
	if len(ms) == 0 {
		return ""
	}
	return ms[0].text
}

package dingtalk

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/dingtalktest"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// The vector of feishu-webhook.md §5.1, checked against the test server's
// independent code too.
func TestSignKnownVector(t *testing.T) {
	const want = "tGWkA5eQOQNCNPDgphtxIoNLO+/gD8Lcb705KQoRzeY="
	if got := Sign("SECdemo", 1599360473000); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
	if got := dingtalktest.ExpectedSign("SECdemo", 1599360473000); got != want {
		t.Fatalf("test server's sign = %s", got)
	}
	u := SignURL("https://oapi.dingtalk.com/robot/send?access_token=abc", "SECdemo", time.UnixMilli(1599360473000))
	if !strings.Contains(u, "sign=tGWkA5eQOQNCNPDgphtxIoNLO%2B%2FgD8Lcb705KQoRzeY%3D") || !strings.Contains(u, "timestamp=1599360473000") || !strings.Contains(u, "access_token=abc") {
		t.Fatalf("signed URL %s", u)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		retryable bool
		reason    notify.Reason
	}{
		{"success", 200, `{"errcode":0,"errmsg":"ok"}`, false, ""},
		{"too fast", 200, `{"errcode":130101,"errmsg":"send too fast, exceed 20 times per minute"}`, true, notify.ReasonRateLimited},
		{"flow limited", 200, `{"errcode":410100,"errmsg":"发送速度太快而限流"}`, true, notify.ReasonRateLimited},
		{"system busy", 200, `{"errcode":-1,"errmsg":"系统繁忙"}`, true, notify.ReasonServer},
		{"keyword", 200, `{"errcode":310000,"errmsg":"keywords not in content"}`, false, notify.ReasonKeyword},
		{"sign", 200, `{"errcode":310000,"errmsg":"sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"}`, false, notify.ReasonSignature},
		{"timestamp", 200, `{"errcode":310000,"errmsg":"invalid timestamp"}`, false, notify.ReasonSignature},
		{"ip", 200, `{"errcode":310000,"errmsg":"ip 1.2.3.4 not in whitelist"}`, false, notify.ReasonIPRejected},
		{"token", 200, `{"errcode":300001,"errmsg":"token is not exist"}`, false, notify.ReasonToken},
		{"too long", 200, `{"errcode":460101,"errmsg":"message too long, exceed 20000 bytes"}`, false, notify.ReasonTooLarge},
		{"missing param", 200, `{"errcode":40035,"errmsg":"缺少参数 json"}`, false, notify.ReasonBadRequest},
		{"unknown code", 200, `{"errcode":99999,"errmsg":"?"}`, false, notify.ReasonBadRequest},
		{"unknown code on 503", 503, `{"errcode":99999,"errmsg":"?"}`, true, notify.ReasonServer},
		{"gateway page", 502, `<html>bad gateway</html>`, true, notify.ReasonServer},
		{"2xx not json", 200, `<html>login</html>`, true, notify.ReasonBadResponse},
		{"2xx without errcode", 200, `{}`, true, notify.ReasonBadResponse},
		{"redirect", 302, ``, false, notify.ReasonRedirect},
		{"404", 404, ``, false, notify.ReasonNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			retry, err := Classify(tc.status, []byte(tc.body))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			}
			if err == nil || retry != tc.retryable || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("Classify = %v, %v; want retryable=%v reason=%s", retry, err, tc.retryable, tc.reason)
			}
		})
	}
}

func bigNotification(rows int) *notify.Notification {
	n := &notify.Notification{Title: "Pod cleanup", Severity: events.SeverityWarning, Cluster: "prod",
		Time: time.Unix(1700000000, 0), Summary: fmt.Sprintf("**%d** cleanup results: deleted %d", rows, rows), Columns: []string{"Pod", "Node", "Result", "Reason"}}
	for i := 0; i < rows; i++ {
		n.Rows = append(n.Rows, []string{fmt.Sprintf("team-%d/pod-with-a-rather-long-name-%05d", i%7, i), "node-0001.example.internal", "deleted", "Evicted: The node was low on resource: memory."})
	}
	return n
}

func TestFitIsTightAndAccountsForEveryRow(t *testing.T) {
	s, err := New(Options{URL: "https://oapi.dingtalk.com/robot/send?access_token=x", Keyword: "ALERT"})
	if err != nil {
		t.Fatal(err)
	}
	for _, total := range []int{3, 500} {
		n := bigNotification(total)
		m, shown, err := s.Fit(n)
		if err != nil {
			t.Fatal(err)
		}
		rows, more := dingtalktest.Message{Text: m.Markdown.Text}.Table()
		if rows != shown || rows+more != total {
			t.Fatalf("%d rows: message lists %d and says %d more (shown %d)", total, rows, more, shown)
		}
		if total == 500 {
			if shown == total {
				t.Fatalf("500 rows fit %d bytes?", s.bodyLimit)
			}
			b, _ := jsonSize(Build(n, "ALERT", shown+1))
			if b <= s.bodyLimit {
				t.Fatalf("%d rows would fit (%d bytes) but %d were shown", shown+1, b, shown)
			}
		}
	}
}

func TestMentionsAndLinksAreDefused(t *testing.T) {
	n := bigNotification(1)
	n.Title = "@all look <!channel>"
	n.Rows[0][0] = "ns/@all-pod"
	n.Rows[0][3] = "see http://evil.example/x and [click](https://evil.example)"
	m := Build(n, "", 1)
	all := m.Markdown.Title + m.Markdown.Text
	for _, bad := range []string{"@", "http://", "https://", "](", "<!"} {
		if strings.Contains(all, bad) {
			t.Errorf("message contains %q:\n%s", bad, all)
		}
	}
	if m.At.IsAtAll || len(m.At.AtMobiles) != 0 {
		t.Errorf("message mentions someone: %+v", m.At)
	}
}

func TestSendAgainstDingTalkCompatibleServer(t *testing.T) {
	srv := dingtalktest.NewServer()
	t.Cleanup(srv.Close)
	signed := srv.AddRobot("signed", dingtalktest.Robot{Secret: "SECs3cret", Keywords: []string{"ALERT"}})
	tests := []struct {
		name      string
		secret    config.Secret
		keyword   string
		url       string
		clock     time.Time
		retryable bool
		reason    notify.Reason
	}{
		{"signed with keyword", "SECs3cret", "ALERT", signed, time.Now(), false, ""},
		{"wrong secret", "SECwrong", "ALERT", signed, time.Now(), false, notify.ReasonSignature},
		{"unsigned", "", "ALERT", signed, time.Now(), false, notify.ReasonSignature},
		{"clock two hours off", "SECs3cret", "ALERT", signed, time.Now().Add(-2 * time.Hour), false, notify.ReasonSignature},
		{"keyword missing", "SECs3cret", "", signed, time.Now(), false, notify.ReasonKeyword},
		{"unknown token", "", "", srv.URL + dingtalktest.Path + "?access_token=nobody", time.Now(), false, notify.ReasonToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := tc.clock
			s, err := New(Options{URL: config.Secret(tc.url), Secret: tc.secret, Keyword: tc.keyword, Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			retry, err := s.Send(context.Background(), bigNotification(300))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Send: %v", err)
				}
				return
			}
			if err == nil || retry != tc.retryable || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("Send = %v, %v; want reason %s", retry, err, tc.reason)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "access_token") {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
	msgs := srv.Messages("signed")
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0].Title, "[ALERT] ") {
		t.Fatalf("accepted = %+v", msgs)
	}
	if rows, more := msgs[0].Table(); rows+more != 300 || more == 0 {
		t.Fatalf("accepted message lists %d rows + %d more, want 300 with a cut", rows, more)
	}
}

// TestRateLimitAnswerIsRetryable: the 21st message in a minute gets
// DingTalk's 130101, which must be retried, not dead-lettered.
func TestRateLimitAnswerIsRetryable(t *testing.T) {
	srv := dingtalktest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddRobot("r", dingtalktest.Robot{})
	s, _ := New(Options{URL: config.Secret(u)})
	for i := 0; i < dingtalktest.PerMinute; i++ {
		if _, err := s.Send(context.Background(), bigNotification(1)); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	retry, err := s.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonRateLimited {
		t.Fatalf("21st message: %v, %v; want a retryable rate limit", retry, err)
	}
}

func TestTransportErrorDoesNotLeakTheURL(t *testing.T) {
	srv := dingtalktest.NewServer()
	u := srv.AddRobot("tok-SECRET-123", dingtalktest.Robot{})
	srv.Close()
	s, _ := New(Options{URL: config.Secret(u), Secret: "SECx", Client: &http.Client{Timeout: 2 * time.Second}})
	retry, err := s.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonTransport {
		t.Fatalf("Send = %v, %v", retry, err)
	}
	if strings.Contains(err.Error(), "tok-SECRET-123") || strings.Contains(err.Error(), "sign=") {
		t.Fatalf("error leaks the URL: %v", err)
	}
}

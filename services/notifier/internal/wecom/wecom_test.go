package wecom

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/wecomtest"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		retryable bool
		reason    notify.Reason
	}{
		{"success", 200, `{"errcode":0,"errmsg":"ok"}`, false, ""},
		{"freq", 200, `{"errcode":45009,"errmsg":"api freq out of limit"}`, true, notify.ReasonRateLimited},
		{"concurrent", 200, `{"errcode":45033,"errmsg":"api concurrent out of limit"}`, true, notify.ReasonRateLimited},
		{"busy", 200, `{"errcode":-1,"errmsg":"system busy"}`, true, notify.ReasonServer},
		{"invalid url", 200, `{"errcode":93000,"errmsg":"invalid webhook url, hint: [x]"}`, false, notify.ReasonToken},
		{"too long", 200, `{"errcode":40058,"errmsg":"markdown.content exceed max length 4096"}`, false, notify.ReasonTooLarge},
		{"bad param", 200, `{"errcode":40058,"errmsg":"invalid parameter"}`, false, notify.ReasonBadRequest},
		{"bad type", 200, `{"errcode":40008,"errmsg":"invalid message type"}`, false, notify.ReasonBadRequest},
		{"unknown", 200, `{"errcode":12345,"errmsg":"?"}`, false, notify.ReasonBadRequest},
		{"5xx", 503, ``, true, notify.ReasonServer},
		{"not json", 200, `<html/>`, true, notify.ReasonBadResponse},
		{"redirect", 301, ``, false, notify.ReasonRedirect},
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
	n := &notify.Notification{Title: "Pod cleanup", Severity: events.SeverityCritical, Cluster: "prod",
		Time: time.Unix(1700000000, 0), Summary: fmt.Sprintf("**%d** cleanup results", rows), Columns: []string{"Pod", "Node", "Result", "Reason"}, Omitted: 0}
	for i := 0; i < rows; i++ {
		// CJK text: the limit is in bytes, not characters.
		n.Rows = append(n.Rows, []string{fmt.Sprintf("团队-%d/pod-%05d", i%7, i), "节点-0001", "deleted", "Evicted: 节点内存不足"})
	}
	return n
}

func TestSendFitsTheContentLimitAndAccountsForEveryRow(t *testing.T) {
	srv := wecomtest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddRobot("k1")
	s, err := New(Options{URL: config.Secret(u)})
	if err != nil {
		t.Fatal(err)
	}
	for _, total := range []int{2, 400} {
		n := bigNotification(total)
		n.Omitted = 7
		if _, err := s.Send(context.Background(), n); err != nil {
			t.Fatalf("%d rows: %v", total, err)
		}
		_, shown, _ := s.Fit(n)
		if total > shown && len(Build(n, shown+1)) <= DefaultContentLimit {
			t.Fatalf("%d rows would fit, %d shown", shown+1, shown)
		}
	}
	msgs := srv.Messages("k1")
	if len(msgs) != 2 {
		t.Fatalf("accepted %d messages", len(msgs))
	}
	for i, want := range []int{2 + 7, 400 + 7} {
		rows, more := msgs[i].Table()
		if rows+more != want || len(msgs[i].Content) > wecomtest.ContentLimit {
			t.Errorf("message %d: %d rows + %d more (want %d), %d bytes", i, rows, more, want, len(msgs[i].Content))
		}
	}
	if !strings.Contains(msgs[1].Content, `<font color="warning">[CRITICAL]</font>`) {
		t.Errorf("no severity:\n%s", msgs[1].Content)
	}
}

func TestServerRefusesOversizeContent(t *testing.T) {
	srv := wecomtest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddRobot("k")
	// A sink told the limit is larger than WeCom's sends what WeCom refuses.
	s, _ := New(Options{URL: config.Secret(u), ContentLimit: 100000})
	retry, err := s.Send(context.Background(), bigNotification(400))
	if retry || notify.ReasonOf(err) != notify.ReasonTooLarge {
		t.Fatalf("Send = %v, %v; want permanent too_large", retry, err)
	}
}

func TestMentionsAreDefused(t *testing.T) {
	srv := wecomtest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddRobot("k")
	s, _ := New(Options{URL: config.Secret(u)})
	n := bigNotification(1)
	n.Title = "<@all> and @all"
	n.Rows[0][3] = "<@zhangsan> see [x](http://evil.example)"
	if _, err := s.Send(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	m := srv.Messages("k")[0]
	if m.Mentions || strings.Contains(m.Content, "@") || strings.Contains(m.Content, "](") || strings.Contains(m.Content, "http://") {
		t.Fatalf("content mentions or links:\n%s", m.Content)
	}
}

func TestRateLimitAndUnknownKey(t *testing.T) {
	srv := wecomtest.NewServer()
	t.Cleanup(srv.Close)
	s, _ := New(Options{URL: config.Secret(srv.AddRobot("k"))})
	for i := 0; i < wecomtest.PerMinute; i++ {
		if _, err := s.Send(context.Background(), bigNotification(1)); err != nil {
			t.Fatal(err)
		}
	}
	if retry, err := s.Send(context.Background(), bigNotification(1)); !retry || notify.ReasonOf(err) != notify.ReasonRateLimited {
		t.Fatalf("21st: %v, %v", retry, err)
	}
	bad, _ := New(Options{URL: config.Secret(srv.URL + wecomtest.Path + "?key=nobody-SECRET")})
	retry, err := bad.Send(context.Background(), bigNotification(1))
	if retry || notify.ReasonOf(err) != notify.ReasonToken || strings.Contains(err.Error(), "nobody-SECRET") {
		t.Fatalf("unknown key: %v, %v", retry, err)
	}
	srv.Close()
	closed, _ := New(Options{URL: config.Secret(srv.URL + wecomtest.Path + "?key=k-SECRET"), Client: &http.Client{Timeout: time.Second}})
	retry, err = closed.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonTransport || strings.Contains(err.Error(), "k-SECRET") {
		t.Fatalf("transport: %v, %v", retry, err)
	}
}

package feishu

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// The vectors of feishu-webhook.md §2.1; the second matches an independent
// third-party test against a live bot.
func TestSignKnownVectors(t *testing.T) {
	tests := []struct {
		secret string
		ts     int64
		want   string
	}{
		{"demo", 1599360473, "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8="},
		{"dGhpcyBpcyBhIGtleQ==", 1716283459, "8EyY+xxfJvzWjZQpdc2mgvQFaG7lF5nbxl7RITyMkJU="},
	}
	for _, tc := range tests {
		t.Run(tc.secret, func(t *testing.T) {
			if got := Sign(tc.secret, tc.ts); got != tc.want {
				t.Fatalf("Sign = %s, want %s", got, tc.want)
			}
			if got := feishutest.ExpectedSign(tc.secret, tc.ts); got != tc.want {
				t.Fatalf("test server's sign = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		body      string
		retryable bool
		reason    notify.Reason // "" = success
	}{
		{"success", 200, `{"StatusCode":0,"StatusMessage":"success","code":0,"data":{},"msg":"success"}`, false, ""},
		{"legacy success", 200, `{"Extra":null,"StatusCode":0,"StatusMessage":"success"}`, false, ""},
		{"statuscode 0 but code 9499", 200, `{"StatusCode":0,"StatusMessage":"","code":9499,"msg":"too many request"}`, true, notify.ReasonRateLimited},
		{"9499 bad request", 200, `{"code":9499,"msg":"Bad Request","data":{}}`, false, notify.ReasonBadRequest},
		{"11232", 200, `{"code":11232,"msg":"frequency limited psm[lark.oapi.app_platform_runtime]appID[1500]"}`, true, notify.ReasonRateLimited},
		{"19001", 200, `{"code":19001,"msg":"param invalid: incoming webhook access token invalid"}`, false, notify.ReasonToken},
		{"19021", 200, `{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}`, false, notify.ReasonSignature},
		{"19022", 200, `{"code":19022,"msg":"Ip Not Allowed"}`, false, notify.ReasonIPRejected},
		{"19024", 200, `{"code":19024,"msg":"Key Words Not Found"}`, false, notify.ReasonKeyword},
		{"unknown code", 200, `{"code":12345,"msg":"?"}`, false, notify.ReasonBadRequest},
		{"no code at all", 200, `{}`, true, notify.ReasonBadResponse},
		{"2xx html", 200, `<html>proxy</html>`, true, notify.ReasonBadResponse},
		{"500", 500, `oops`, true, notify.ReasonServer},
		{"503 json", 503, `{"code":0}`, true, notify.ReasonServer},
		{"429", 429, ``, true, notify.ReasonRateLimited},
		{"404", 404, `not found`, false, notify.ReasonBadRequest},
		// The body's code comes first, whatever the status.
		{"400 with 11232", 400, `{"code":11232,"msg":"frequency limited psm[lark.oapi.app_platform_runtime]appID[1500]"}`, true, notify.ReasonRateLimited},
		{"400 with 9499 too many", 400, `{"code":9499,"msg":"too many request"}`, true, notify.ReasonRateLimited},
		{"400 with 9499 bad request", 400, `{"code":9499,"msg":"Bad Request"}`, false, notify.ReasonBadRequest},
		{"403 with 19021", 403, `{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}`, false, notify.ReasonSignature},
		{"500 with 11232", 500, `{"code":11232,"msg":"frequency limited"}`, true, notify.ReasonRateLimited},
		{"500 with 19024", 500, `{"code":19024,"msg":"Key Words Not Found"}`, false, notify.ReasonKeyword},
		{"502 with an unknown code", 502, `{"code":12345,"msg":"?"}`, true, notify.ReasonServer},
		{"429 with an unknown code", 429, `{"code":12345,"msg":"?"}`, true, notify.ReasonRateLimited},
		{"400 with code 0", 400, `{"code":0,"msg":"success"}`, false, notify.ReasonBadRequest},
		{"302", 302, ``, false, notify.ReasonRedirect},
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

// TestClassifyReadsTheLegacyMessage: the legacy answer carries its text in
// StatusMessage, not msg. It is the error's message (logged and in the dead
// letter), and it decides 9499 as it does in the current shape: "too many
// request" is throttling, retried, not a bad request dead-lettered.
func TestClassifyReadsTheLegacyMessage(t *testing.T) {
	tests := []struct {
		name, body string
		retryable  bool
		reason     notify.Reason
		msg        string
	}{
		{"legacy 19021", `{"Extra":null,"StatusCode":19021,"StatusMessage":"sign match fail or timestamp is not within one hour from current time"}`,
			false, notify.ReasonSignature, "sign match fail or timestamp is not within one hour from current time"},
		{"legacy 9499 too many", `{"Extra":null,"StatusCode":9499,"StatusMessage":"too many request"}`, true, notify.ReasonRateLimited, "too many request"},
		{"current shape", `{"code":19024,"msg":"Key Words Not Found"}`, false, notify.ReasonKeyword, "Key Words Not Found"},
		{"both shapes: msg first", `{"code":19021,"msg":"sign match fail","StatusCode":19021,"StatusMessage":"other"}`, false, notify.ReasonSignature, "sign match fail"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			retry, err := Classify(200, []byte(tc.body))
			var se *notify.SendError
			if !errors.As(err, &se) || retry != tc.retryable || se.Reason != tc.reason || se.Msg != tc.msg {
				t.Fatalf("Classify = %v, %#v; want retryable=%v reason=%s msg=%q", retry, err, tc.retryable, tc.reason, tc.msg)
			}
		})
	}
}

func bigNotification(rows int) *notify.Notification {
	n := &notify.Notification{Title: "Pod cleanup", Severity: events.SeverityWarning, Cluster: "prod",
		Time: time.Unix(1700000000, 0), Summary: "**500** cleanup results", Columns: []string{"Pod", "Node", "Result", "Reason"}}
	for i := 0; i < rows; i++ {
		n.Rows = append(n.Rows, []string{fmt.Sprintf("team-%d/pod-with-a-rather-long-name-%05d", i%7, i), "node-0001.example.internal", "deleted", "Evicted: The node was low on resource: memory."})
	}
	return n
}

func TestFitKeepsBodyUnderLimit(t *testing.T) {
	tests := []struct {
		name     string
		rows     int
		secret   config.Secret
		wantAll  bool
		wantMore bool
	}{
		{"few rows fit", 5, "", true, false},
		{"500 rows are cut", 500, "", false, true},
		{"500 rows signed", 500, "s3cret", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options{URL: "https://open.feishu.cn/open-apis/bot/v2/hook/x", Secret: tc.secret})
			if err != nil {
				t.Fatal(err)
			}
			n := bigNotification(tc.rows)
			card, shown, err := s.Fit(n)
			if err != nil {
				t.Fatal(err)
			}
			if (shown == tc.rows) != tc.wantAll {
				t.Fatalf("shown %d of %d rows", shown, tc.rows)
			}
			body := card.Elements[2].Content
			more := fmt.Sprintf("…and %d more", tc.rows-shown)
			if strings.Contains(body, more) != tc.wantMore {
				t.Fatalf("table %q: 'and more' line present=%v, want %v", body[len(body)-40:], !tc.wantMore, tc.wantMore)
			}
			// Adding one more row must not fit: the cut is tight.
			if !tc.wantAll {
				s2 := *s
				n2 := *n
				n2.Rows = n.Rows[:shown+1]
				s2.bodyLimit = s.bodyLimit
				if _, got, _ := s2.Fit(&n2); got == shown+1 {
					t.Fatalf("%d rows fit the limit but only %d were shown", shown+1, shown)
				}
			}
		})
	}
}

func TestSendAgainstFeishuCompatibleServer(t *testing.T) {
	srv := feishutest.NewServer()
	t.Cleanup(srv.Close)
	signed := srv.AddBot("signed", feishutest.Bot{Secret: "s3cret", Keywords: []string{"ALERTBOT"}})
	tests := []struct {
		name      string
		secret    config.Secret
		keyword   string
		url       string
		clock     time.Time
		retryable bool
		reason    notify.Reason
	}{
		{"signed with keyword", "s3cret", "ALERTBOT", signed, time.Now(), false, ""},
		{"wrong secret", "wrong", "ALERTBOT", signed, time.Now(), false, notify.ReasonSignature},
		{"clock two hours off", "s3cret", "ALERTBOT", signed, time.Now().Add(-2 * time.Hour), false, notify.ReasonSignature},
		{"keyword missing", "s3cret", "", signed, time.Now(), false, notify.ReasonKeyword},
		{"unknown token", "", "", srv.URL + feishutest.HookPrefix + "nobody", time.Now(), false, notify.ReasonToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := tc.clock
			s, err := New(Options{URL: config.Secret(tc.url), Secret: tc.secret, Keyword: tc.keyword, Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			retry, err := s.Send(context.Background(), bigNotification(3))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("Send: %v", err)
				}
				return
			}
			if err == nil || retry != tc.retryable || notify.ReasonOf(err) != tc.reason {
				t.Fatalf("Send = %v, %v; want reason %s", retry, err, tc.reason)
			}
		})
	}
	cards := srv.Cards("signed")
	if len(cards) != 1 || !strings.HasPrefix(cards[0].Title(), "[ALERTBOT] ") || cards[0].Header.Template != "orange" {
		t.Fatalf("accepted cards = %+v", cards)
	}
}

func TestTransportErrorsDoNotLeakTheURL(t *testing.T) {
	srv := feishutest.NewServer()
	u := srv.AddBot("tok-SECRET-123", feishutest.Bot{})
	srv.Close() // connection refused from now on
	s, err := New(Options{URL: config.Secret(u), Client: &http.Client{Timeout: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := s.Send(context.Background(), bigNotification(1))
	if err == nil || !retry || notify.ReasonOf(err) != notify.ReasonTransport {
		t.Fatalf("Send = %v, %v; want retryable transport error", retry, err)
	}
	if strings.Contains(err.Error(), "tok-SECRET-123") || strings.Contains(err.Error(), u) {
		t.Fatalf("error leaks the URL: %v", err)
	}
	if _, err := New(Options{URL: "not a url with tok-SECRET-123"}); err == nil || strings.Contains(err.Error(), "tok-SECRET") {
		t.Fatalf("New with bad URL: %v", err)
	}
	var se *notify.SendError
	if !errors.As(err, &se) {
		t.Fatalf("want *notify.SendError")
	}
}

// TestKeywordInTheCardText: the keyword is in a text element of the card,
// not only in the header title (feishutest refuses a title-only keyword).
func TestKeywordInTheCardText(t *testing.T) {
	c := BuildCard(bigNotification(2), "ALERTBOT", 2)
	if !strings.HasPrefix(c.Header.Title.Content, "[ALERTBOT] ") {
		t.Errorf("title %q lacks the keyword", c.Header.Title.Content)
	}
	note := c.Elements[len(c.Elements)-1]
	if note.Tag != "note" || !strings.Contains(note.Elements[0].Content, "ALERTBOT") {
		t.Errorf("footer note %+v lacks the keyword", note)
	}
	if c := BuildCard(bigNotification(1), "", 1); strings.Contains(c.Elements[len(c.Elements)-1].Elements[0].Content, "·  ") {
		t.Errorf("footer without keyword: %+v", c.Elements)
	}
}

// TestRedirectIsNotFollowed: a 302 to another address is a permanent
// failure, never a GET of the new location.
func TestRedirectIsNotFollowed(t *testing.T) {
	srv := feishutest.NewServer()
	t.Cleanup(srv.Close)
	target := srv.AddBot("moved-here", feishutest.Bot{})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, target, http.StatusFound) })
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)
	s, err := New(Options{URL: config.Secret(front.URL + feishutest.HookPrefix + "old-token-77")})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := s.Send(context.Background(), bigNotification(1))
	if retry || notify.ReasonOf(err) != notify.ReasonRedirect {
		t.Fatalf("Send = %v, %v; want a permanent redirect failure", retry, err)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("the redirect was followed: %d requests at its target", n)
	}
	if strings.Contains(err.Error(), "old-token-77") || strings.Contains(err.Error(), "moved-here") {
		t.Errorf("error leaks a URL: %v", err)
	}
}

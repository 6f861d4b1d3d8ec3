package slack

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/slacktest"
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
		{"ok", 200, "ok", false, ""},
		{"invalid_payload", 400, "invalid_payload", false, notify.ReasonBadRequest},
		{"no_text", 400, "no_text", false, notify.ReasonBadRequest},
		{"invalid_blocks", 400, "invalid_blocks", false, notify.ReasonBadRequest},
		{"general denied", 400, "posting_to_general_channel_denied", false, notify.ReasonBadRequest},
		{"too long", 400, "msg_too_long", false, notify.ReasonTooLarge},
		{"prohibited", 403, "action_prohibited", false, notify.ReasonForbidden},
		{"invalid_token", 403, "invalid_token", false, notify.ReasonToken},
		{"no_service", 404, "no_service", false, notify.ReasonNotFound},
		{"channel_not_found", 404, "channel_not_found", false, notify.ReasonNotFound},
		{"archived", 410, "channel_is_archived", false, notify.ReasonNotFound},
		{"team_disabled", 403, "team_disabled", false, notify.ReasonForbidden},
		{"no_active_hooks", 403, "no_active_hooks", false, notify.ReasonNotFound},
		{"429", 429, "rate_limited", true, notify.ReasonRateLimited},
		{"429 without body", 429, "", true, notify.ReasonRateLimited},
		{"500", 500, "rollup_error", true, notify.ReasonServer},
		{"503 page", 503, "<html>unavailable</html>", true, notify.ReasonServer},
		{"200 not ok", 200, "<html>proxy</html>", true, notify.ReasonBadResponse},
		{"302", 302, "", false, notify.ReasonRedirect},
		{"unknown 400", 400, "something_new", false, notify.ReasonBadRequest},
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
		Time: time.Unix(1700000000, 0), Summary: fmt.Sprintf("**%d** cleanup results: deleted %d\n**Pod reasons:** Evicted %d", rows, rows, rows),
		Columns: []string{"Pod", "Node", "Result", "Reason"}}
	for i := 0; i < rows; i++ {
		n.Rows = append(n.Rows, []string{fmt.Sprintf("team-%d/pod-with-a-rather-long-name-%05d", i%7, i), "node-0001.example.internal", "deleted", "Evicted: The node was low on resource: memory & disk."})
	}
	return n
}

func TestSendValidBlocksAndAccounting(t *testing.T) {
	srv := slacktest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddHook("T000/B000/XXXX")
	s, err := New(Options{URL: config.Secret(u)})
	if err != nil {
		t.Fatal(err)
	}
	n := bigNotification(500)
	_, shown, _ := s.Fit(n)
	if shown == 0 || shown == 500 {
		t.Fatalf("shown %d of 500", shown)
	}
	if m := Build(n, shown+1); tableChars(m) <= SectionLimit {
		t.Fatalf("%d rows would fit the section, %d shown", shown+1, shown)
	}
	if _, err := s.Send(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	msgs := srv.Messages("T000/B000/XXXX")
	if len(msgs) != 1 {
		t.Fatalf("accepted %d", len(msgs))
	}
	m := msgs[0]
	if rows, more := m.Table(); rows != shown || rows+more != 500 {
		t.Fatalf("%d rows + %d more, want 500", rows, more)
	}
	if !strings.Contains(m.Header, "[WARNING] Pod cleanup") || !strings.Contains(m.Sections[0], "*500* cleanup results") ||
		!strings.Contains(m.All(), "&amp; disk") || !strings.Contains(m.Context[0], "cluster prod") {
		t.Fatalf("message:\n%s", m.All())
	}
}

func TestMentionsAndLinksAreDefused(t *testing.T) {
	srv := slacktest.NewServer()
	t.Cleanup(srv.Close)
	s, _ := New(Options{URL: config.Secret(srv.AddHook("T/B/X"))})
	n := bigNotification(1)
	n.Title = "<!channel> @here"
	n.Rows[0][0] = "<@U123>"
	n.Rows[0][3] = "<https://evil.example|click> and https://evil.example"
	if _, err := s.Send(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	m := srv.Messages("T/B/X")[0]
	if m.Mentions || strings.Contains(m.All(), "://") {
		t.Fatalf("message mentions or links:\n%s", m.All())
	}
}

// TestRateLimitCarriesRetryAfter: a second message within a second gets
// Slack's 429 with Retry-After, which the error carries for the retry loop.
func TestRateLimitCarriesRetryAfter(t *testing.T) {
	srv := slacktest.NewServer()
	t.Cleanup(srv.Close)
	s, _ := New(Options{URL: config.Secret(srv.AddHook("T/B/Y"))})
	if _, err := s.Send(context.Background(), bigNotification(1)); err != nil {
		t.Fatal(err)
	}
	retry, err := s.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonRateLimited || notify.RetryAfterOf(err) != time.Second {
		t.Fatalf("second message: %v, %v (retry after %v)", retry, err, notify.RetryAfterOf(err))
	}
}

func TestUnknownHookAndTransportDoNotLeakTheURL(t *testing.T) {
	srv := slacktest.NewServer()
	s, _ := New(Options{URL: config.Secret(srv.URL + slacktest.PathPrefix + "T/B/SECRET-1")})
	retry, err := s.Send(context.Background(), bigNotification(1))
	if retry || notify.ReasonOf(err) != notify.ReasonNotFound || strings.Contains(err.Error(), "SECRET-1") {
		t.Fatalf("unknown hook: %v, %v", retry, err)
	}
	srv.Close()
	s, _ = New(Options{URL: config.Secret(srv.URL + slacktest.PathPrefix + "T/B/SECRET-2"), Client: &http.Client{Timeout: time.Second}})
	retry, err = s.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonTransport || strings.Contains(err.Error(), "SECRET-2") {
		t.Fatalf("transport: %v, %v", retry, err)
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	now := time.Now()
	h := httptest.NewRecorder().Header()
	h.Set("Retry-After", now.Add(30*time.Second).UTC().Format(http.TimeFormat))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", h.Get("Retry-After"))
		w.WriteHeader(429)
	}))
	t.Cleanup(srv.Close)
	s, _ := New(Options{URL: config.Secret(srv.URL + "/services/x"), Now: func() time.Time { return now }})
	_, err := s.Send(context.Background(), bigNotification(1))
	if ra := notify.RetryAfterOf(err); ra < 28*time.Second || ra > 30*time.Second {
		t.Fatalf("Retry-After as a date: %v (%v)", ra, err)
	}
}

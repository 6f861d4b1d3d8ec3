package teams

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/teamstest"
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
		{"workflows accepted", 202, ``, false, ""},
		{"legacy ok", 200, `1`, false, ""},
		{"legacy 429 behind 200", 200, `Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 429 with ContextId tcid=0`, true, notify.ReasonRateLimited},
		{"legacy 413 behind 200", 200, `Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 413 with ContextId x`, false, notify.ReasonTooLarge},
		{"legacy 500 behind 200", 200, `... returned HTTP error 500 with ContextId x`, true, notify.ReasonServer},
		{"200 unknown text", 200, `<html>proxy</html>`, true, notify.ReasonBadResponse},
		{"throttled", 429, `{"error":{"code":"TooManyRequests"}}`, true, notify.ReasonRateLimited},
		{"schema mismatch", 400, `{"error":{"code":"TriggerInputSchemaMismatch","message":"..."}}`, false, notify.ReasonBadRequest},
		{"no sig", 401, `{"error":{"code":"DirectApiAuthorizationRequired"}}`, false, notify.ReasonToken},
		{"forbidden", 403, ``, false, notify.ReasonForbidden},
		{"deleted workflow", 404, `{"error":{"code":"WorkflowNotFound"}}`, false, notify.ReasonNotFound},
		{"too large", 413, ``, false, notify.ReasonTooLarge},
		{"gateway", 502, `<html/>`, true, notify.ReasonServer},
		{"redirect", 307, ``, false, notify.ReasonRedirect},
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
		Time: time.Unix(1700000000, 0), Summary: fmt.Sprintf("**%d** cleanup results: deleted %d\n**Pod reasons:** Evicted %d", rows, rows, rows),
		Columns: []string{"Pod", "Node", "Result", "Reason"}}
	for i := 0; i < rows; i++ {
		n.Rows = append(n.Rows, []string{fmt.Sprintf("team-%d/pod-with-a-rather-long-name-%05d", i%7, i), "node-0001.example.internal", "deleted", "Evicted: The node was low on resource: memory."})
	}
	return n
}

func TestSendPostsAValidCardWithinTheLimit(t *testing.T) {
	srv := teamstest.NewServer()
	t.Cleanup(srv.Close)
	u := srv.AddWorkflow("wf1", "sig-abc")
	s, err := New(Options{URL: config.Secret(u)})
	if err != nil {
		t.Fatal(err)
	}
	for _, total := range []int{3, 500} {
		n := bigNotification(total)
		if _, err := s.Send(context.Background(), n); err != nil {
			t.Fatalf("%d rows: %v", total, err)
		}
		if _, shown, _ := s.Fit(n); shown < total {
			if sz, _ := jsonLen(Build(n, shown+1)); sz <= s.bodyLimit {
				t.Fatalf("%d rows would fit, %d shown", shown+1, shown)
			}
		}
	}
	if d := srv.Dropped(); len(d) != 0 {
		t.Fatalf("Teams would drop: %v", d)
	}
	cards := srv.Cards("wf1")
	if len(cards) != 2 {
		t.Fatalf("%d cards", len(cards))
	}
	for i, want := range []int{3, 500} {
		rows, more := cards[i].Table()
		if rows+more != want || (want == 500 && more == 0) {
			t.Errorf("card %d: %d rows + %d more, want %d\n%s", i, rows, more, want, cards[i].Text())
		}
	}
	if !strings.HasPrefix(cards[1].Texts[0], "[CRITICAL] Pod cleanup") || !strings.Contains(cards[1].Text(), "cluster prod") {
		t.Errorf("card:\n%s", cards[1].Text())
	}
}

func TestOversizeCardWouldBeDroppedSilently(t *testing.T) {
	// Why the budget matters: with a budget above Teams' limit the
	// Workflows webhook still answers 202, and the card is lost.
	srv := teamstest.NewServer()
	t.Cleanup(srv.Close)
	s, _ := New(Options{URL: config.Secret(srv.AddWorkflow("wf", "s")), BodyLimit: 200000})
	if _, err := s.Send(context.Background(), bigNotification(500)); err != nil {
		t.Fatal(err)
	}
	if len(srv.Dropped()) != 1 || len(srv.Cards("wf")) != 0 {
		t.Fatalf("dropped %v, cards %d", srv.Dropped(), len(srv.Cards("wf")))
	}
}

func TestMentionsAndLinksAreDefused(t *testing.T) {
	srv := teamstest.NewServer()
	t.Cleanup(srv.Close)
	s, _ := New(Options{URL: config.Secret(srv.AddWorkflow("wf", "s"))})
	n := bigNotification(1)
	n.Title = "<at>everyone</at> @team"
	n.Rows[0][3] = "[click](https://evil.example) www.evil.example"
	if _, err := s.Send(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	c := srv.Cards("wf")[0]
	if c.Mentions || strings.Contains(c.Text(), "@") || strings.Contains(c.Text(), "](") || strings.Contains(c.Text(), "://") || strings.Contains(c.Text(), "www.") {
		t.Fatalf("card mentions or links:\n%s", c.Text())
	}
}

func TestRateLimitSigAndTransport(t *testing.T) {
	srv := teamstest.NewServer()
	s, _ := New(Options{URL: config.Secret(srv.AddWorkflow("wf", "s"))})
	for i := 0; i < 4; i++ {
		if _, err := s.Send(context.Background(), bigNotification(1)); err != nil {
			t.Fatal(err)
		}
	}
	retry, err := s.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonRateLimited || notify.RetryAfterOf(err) != time.Second {
		t.Fatalf("5th in a second: %v, %v, retry after %v", retry, err, notify.RetryAfterOf(err))
	}
	bad, _ := New(Options{URL: config.Secret(strings.Replace(srv.AddWorkflow("wf2", "right-SIG"), "right-SIG", "wrong-SIG", 1))})
	retry, err = bad.Send(context.Background(), bigNotification(1))
	if retry || notify.ReasonOf(err) != notify.ReasonToken || strings.Contains(err.Error(), "SIG") {
		t.Fatalf("wrong sig: %v, %v", retry, err)
	}
	srv.Close()
	closed, _ := New(Options{URL: config.Secret(srv.URL + "/workflows/x/triggers/manual/paths/invoke?sig=SECRET-9"), Client: &http.Client{Timeout: time.Second}})
	retry, err = closed.Send(context.Background(), bigNotification(1))
	if !retry || notify.ReasonOf(err) != notify.ReasonTransport || strings.Contains(err.Error(), "SECRET-9") {
		t.Fatalf("transport: %v, %v", retry, err)
	}
}

package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

func notification(n int) *notify.Notification {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	nt := &notify.Notification{Receiver: "hook", Route: "ops", Key: "ops/cleanup", Title: "Pod cleanup", Severity: events.SeverityWarning,
		Cluster: "prod", Time: t0, Summary: "**3** cleanup results", Rows: [][]string{{"cut", "by", "a", "sink"}}}
	for i := 0; i < n; i++ {
		id := "cleanup/uid-" + string(rune('a'+i))
		nt.Items = append(nt.Items, &notify.Item{ID: id, Subject: "ops.prod.cleanup.deleted.ns.p" + string(rune('a'+i)),
			Type: events.TypeCleanup, Severity: events.SeverityInfo, Time: t0.Add(time.Duration(i) * time.Second),
			Data: json.RawMessage(`{"verb":"deleted","namespace":"ns","pod":"p` + string(rune('a'+i)) + `","extra":{"kept":true}}`)})
	}
	return nt
}

// recorder is a receiver answering with a fixed status.
type recorder struct {
	mu     sync.Mutex
	status int
	bodies [][]byte
	ctype  string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.ctype = req.Header.Get("Content-Type")
	status := r.status
	r.mu.Unlock()
	if status >= 300 && status < 400 {
		// Following this would be a second request (a GET) to this server.
		w.Header().Set("Location", "/landing/secret-token-123")
	}
	w.WriteHeader(status)
}

// TestPayloadListsEveryEvent: the POSTed document carries the envelope of
// the notification and every event with its id, subject, type and original
// payload byte for byte, not only the rows a chat card would show.
func TestPayloadListsEveryEvent(t *testing.T) {
	for _, count := range []int{1, 3, 26} {
		rec := &recorder{status: http.StatusOK}
		srv := httptest.NewServer(rec)
		t.Cleanup(srv.Close)
		s, err := New(config.Secret(srv.URL+"/hook/token"), srv.Client())
		if err != nil {
			t.Fatal(err)
		}
		n := notification(count)
		if retry, err := s.Send(context.Background(), n); err != nil || retry {
			t.Fatalf("Send = %v, %v", retry, err)
		}
		if len(rec.bodies) != 1 || !strings.HasPrefix(rec.ctype, "application/json") {
			t.Fatalf("%d posts with content type %q", len(rec.bodies), rec.ctype)
		}
		var p struct {
			Payload
			Events []struct {
				ID       string          `json:"id"`
				Subject  string          `json:"subject"`
				Type     string          `json:"type"`
				Severity string          `json:"severity"`
				Time     time.Time       `json:"time"`
				Data     json.RawMessage `json:"data"`
			} `json:"events"`
		}
		if err := json.Unmarshal(rec.bodies[0], &p); err != nil {
			t.Fatalf("body is not JSON: %v\n%s", err, rec.bodies[0])
		}
		if p.Version != "1" || p.Receiver != "hook" || p.Route != "ops" || p.GroupKey != "ops/cleanup" || p.Cluster != "prod" ||
			p.Title != "Pod cleanup" || p.Severity != events.SeverityWarning || p.Summary != n.Summary {
			t.Errorf("envelope fields %+v", p.Payload)
		}
		if !p.Time.Equal(n.Time) || p.Time.Location() != time.UTC {
			t.Errorf("time %v, want %v in UTC", p.Time, n.Time)
		}
		if p.Count != count || len(p.Events) != count {
			t.Fatalf("count %d with %d events, want %d", p.Count, len(p.Events), count)
		}
		for i, e := range p.Events {
			it := n.Items[i]
			if e.ID != it.ID || e.Subject != it.Subject || e.Type != it.Type || e.Severity != string(it.Severity) || !e.Time.Equal(it.Time) {
				t.Errorf("event %d = %+v, want item %+v", i, e, it)
			}
			if string(e.Data) != string(it.Data) {
				t.Errorf("event %d data %s, want the original %s", i, e.Data, it.Data)
			}
		}
	}
}

// TestSendClassification: 2xx delivered, 429 and 5xx retryable, any other
// status permanent, transport failures retryable; errors never carry the URL.
func TestSendClassification(t *testing.T) {
	tests := []struct {
		status    int
		retryable bool
		reason    notify.Reason // "" = delivered
	}{
		{200, false, ""},
		{201, false, ""},
		{204, false, ""},
		{299, false, ""},
		{429, true, notify.ReasonRateLimited},
		{500, true, notify.ReasonServer},
		{502, true, notify.ReasonServer},
		{503, true, notify.ReasonServer},
		{400, false, notify.ReasonBadRequest},
		{401, false, notify.ReasonBadRequest},
		{404, false, notify.ReasonBadRequest},
		{413, false, notify.ReasonBadRequest},
		{304, false, notify.ReasonRedirect},
		{301, false, notify.ReasonRedirect},
		{302, false, notify.ReasonRedirect},
		{307, false, notify.ReasonRedirect},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			rec := &recorder{status: tc.status}
			srv := httptest.NewServer(rec)
			t.Cleanup(srv.Close)
			url := srv.URL + "/hook/secret-token-123"
			s, err := New(config.Secret(url), nil)
			if err != nil {
				t.Fatal(err)
			}
			retry, err := s.Send(context.Background(), notification(2))
			if len(rec.bodies) != 1 {
				t.Fatalf("%d requests, want exactly one attempt", len(rec.bodies))
			}
			if tc.reason == "" {
				if err != nil || retry {
					t.Fatalf("Send = %v, %v; want delivered", retry, err)
				}
				return
			}
			var se *notify.SendError
			if !errors.As(err, &se) || se.Reason != tc.reason || se.Status != tc.status || retry != tc.retryable {
				t.Fatalf("Send = %v, %v; want retryable=%v reason=%s status=%d", retry, err, tc.retryable, tc.reason, tc.status)
			}
			if strings.Contains(err.Error(), "secret-token-123") {
				t.Errorf("error leaks the URL: %v", err)
			}
		})
	}
}

func TestSendTransportFailures(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(hang); slow.Close() })
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()

	tests := []struct {
		name string
		url  string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"connection refused", closedURL + "/hook/secret-token-123", func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
		{"timeout", slow.URL + "/hook/secret-token-123", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(config.Secret(tc.url), nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			retry, err := s.Send(ctx, notification(1))
			if !retry || notify.ReasonOf(err) != notify.ReasonTransport {
				t.Fatalf("Send = %v, %v; want retryable transport error", retry, err)
			}
			if strings.Contains(err.Error(), "secret-token-123") {
				t.Errorf("error leaks the URL: %v", err)
			}
		})
	}
}

func TestNewRejectsBadURLWithoutQuotingIt(t *testing.T) {
	for _, u := range []string{"", "ftp://host/secret-token-123", "/relative/secret-token-123", "http://", "http://[::1/secret-token-123"} {
		_, err := New(config.Secret(u), nil)
		if err == nil {
			t.Errorf("New(%q) accepted", u)
			continue
		}
		if strings.Contains(err.Error(), "secret-token-123") {
			t.Errorf("New(%q) error leaks the URL: %v", u, err)
		}
	}
}

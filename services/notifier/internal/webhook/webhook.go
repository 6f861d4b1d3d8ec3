// Package webhook is the generic JSON receiver: it POSTs every notification
// as a versioned JSON document that lists every event it accounts for (ids,
// subjects and the original payloads), for programs rather than people.
// Classification follows Alertmanager's webhook: 2xx delivered, 429 and 5xx
// retried, other statuses permanent. Redirects are never followed: a 3xx is
// a permanent failure (following it would turn the POST into a GET).
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/httpx"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// Version of the payload format.
const Version = "1"

// Payload is the request body.
type Payload struct {
	Version  string          `json:"version"`
	Receiver string          `json:"receiver"`
	Route    string          `json:"route"`
	GroupKey string          `json:"groupKey"`
	Cluster  string          `json:"cluster"`
	Title    string          `json:"title"`
	Severity events.Severity `json:"severity"`
	Summary  string          `json:"summary"`
	Time     time.Time       `json:"time"`
	Count    int             `json:"count"`
	Events   []Event         `json:"events"`
}

// Event is one OPS message in the payload.
type Event struct {
	ID       string          `json:"id"`
	Subject  string          `json:"subject"`
	Type     string          `json:"type"`
	Severity events.Severity `json:"severity"`
	Time     time.Time       `json:"time"`
	Data     json.RawMessage `json:"data"`
}

// Sink posts payloads to one URL.
type Sink struct {
	url    config.Secret
	client *http.Client
}

var _ notify.Sink = (*Sink)(nil)

// New builds a webhook sink; the error never repeats the URL.
func New(u config.Secret, client *http.Client) (*Sink, error) {
	p, err := url.Parse(u.Value())
	if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
		return nil, errors.New("webhook URL is not an absolute http(s) URL")
	}
	return &Sink{url: u, client: httpx.NoRedirects(client)}, nil
}

// Build renders the payload of a notification.
func Build(n *notify.Notification) Payload {
	p := Payload{Version: Version, Receiver: n.Receiver, Route: n.Route, GroupKey: n.Key, Cluster: n.Cluster,
		Title: n.Title, Severity: n.Severity, Summary: n.Summary, Time: n.Time.UTC(), Count: len(n.Items)}
	for _, it := range n.Items {
		p.Events = append(p.Events, Event{ID: it.ID, Subject: it.Subject, Type: it.Type, Severity: it.Severity, Time: it.Time, Data: it.Data})
	}
	return p
}

// Send makes one attempt.
func (s *Sink) Send(ctx context.Context, n *notify.Notification) (bool, error) {
	body, err := json.Marshal(Build(n))
	if err != nil {
		return false, &notify.SendError{Reason: notify.ReasonBadRequest, Err: err}
	}
	status, _, err := httpx.PostJSON(ctx, s.client, s.url.Value(), body)
	if err != nil {
		return true, err
	}
	switch {
	case status >= 200 && status < 300:
		return false, nil
	case status == http.StatusTooManyRequests:
		return true, &notify.SendError{Reason: notify.ReasonRateLimited, Status: status}
	case status >= 500:
		return true, &notify.SendError{Reason: notify.ReasonServer, Status: status}
	case status >= 300 && status < 400:
		return false, &notify.SendError{Reason: notify.ReasonRedirect, Status: status}
	}
	return false, &notify.SendError{Reason: notify.ReasonBadRequest, Status: status}
}

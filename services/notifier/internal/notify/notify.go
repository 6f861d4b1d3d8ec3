// Package notify holds what every part of the notifier shares: the decoded
// OPS message (Item), the sink-neutral rendered message (Notification), the
// Sink interface every receiver type implements, and the classified send
// error. Keeping the sink contract this small is what makes another chat
// target "one package": it renders a Notification and says whether a failure
// is worth retrying.
package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/locale"
	"github.com/opswire/opswire/shared/events"
)

// Notification is one message to one receiver, rendered from a group of items
// but not yet in any sink's format. Sinks decide how much of Rows fits.
type Notification struct {
	Receiver string
	Route    string
	// Key identifies the group (route + kind) the notification came from.
	Key      string
	Title    string
	Severity events.Severity
	Cluster  string
	Time     time.Time
	// Summary is markdown (the subset both Feishu lark_md and plain readers
	// understand: **bold**, line breaks); user-supplied text is sanitised.
	Summary string
	// Columns and Rows are the table; Rows are already sorted most important
	// first, so a sink that must cut keeps the top.
	Columns []string
	Rows    [][]string
	// Omitted rows were already left out upstream (e.g. a report's top limit).
	Omitted int
	// Items are the OPS messages the notification accounts for.
	Items []*Item
	// Locale is the receiver's language and time zone: sinks take the
	// "…and N more" line, the footer and severity labels from it. nil is
	// English in UTC.
	Locale *locale.Locale
}

// Sink delivers notifications to one destination. It reports whether a
// failure is worth retrying; the caller owns the retry loop, the rate limit
// and the bookkeeping, so a sink makes exactly one attempt per call.
type Sink interface {
	Send(ctx context.Context, n *Notification) (retryable bool, err error)
}

// Reason classifies a failed send; it labels metrics and log lines.
type Reason string

// Reasons of failed sends.
const (
	ReasonTransport   Reason = "transport"    // connection refused, timeout, TLS
	ReasonServer      Reason = "server_error" // HTTP 5xx
	ReasonRateLimited Reason = "rate_limited" // HTTP 429, Feishu 9499 "too many request", 11232
	ReasonBadResponse Reason = "bad_response" // 2xx with a body that does not parse
	ReasonSignature   Reason = "signature"    // Feishu 19021
	ReasonIPRejected  Reason = "ip_rejected"  // Feishu 19022
	ReasonKeyword     Reason = "keyword"      // Feishu 19024
	ReasonToken       Reason = "token"        // Feishu 19001, bot deleted or disabled
	ReasonBadRequest  Reason = "bad_request"  // malformed body, 4xx, other codes
	ReasonTooLarge    Reason = "too_large"    // body over the limit even with no rows
	ReasonRedirect    Reason = "redirect"     // HTTP 3xx: never followed (a 302 turns the POST into a GET)
	ReasonNotFound    Reason = "not_found"    // the hook, channel or workflow no longer exists (Slack no_service, HTTP 404/410)
	ReasonForbidden   Reason = "forbidden"    // the service refuses this sender (Slack action_prohibited, HTTP 401/403)
)

// SendError is a failed send with its classification. Its text never contains
// the receiver's URL or secret.
type SendError struct {
	Reason Reason
	// Status is the HTTP status (0 if none); Code and Msg are the receiver's
	// own answer (Feishu code/msg) when it gave one.
	Status int
	Code   int
	Msg    string
	Err    error
	// RetryAfter is how long the receiver asked the client to wait (Slack's
	// and Teams' Retry-After); the retry loop waits at least that long.
	RetryAfter time.Duration
}

func (e *SendError) Error() string {
	s := string(e.Reason)
	if e.Status != 0 {
		s += fmt.Sprintf(": http %d", e.Status)
	}
	if e.Code != 0 || e.Msg != "" {
		s += fmt.Sprintf(": code %d %q", e.Code, e.Msg)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *SendError) Unwrap() error { return e.Err }

// RetryAfterOf returns the wait a receiver asked for, 0 if none.
func RetryAfterOf(err error) time.Duration {
	var se *SendError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}

// ReasonOf returns the reason of a send error, "other" if it has none.
func ReasonOf(err error) Reason {
	var se *SendError
	if errors.As(err, &se) {
		return se.Reason
	}
	return "other"
}

// Package slack is the Slack incoming-webhook receiver: Block Kit messages
// (header, summary, table, context) with the same content as the Feishu
// card, within Block Kit's text limits and the body budget, and every answer
// judged by Slack's plain-text answers ("ok", error strings) and HTTP status,
// honouring Retry-After on 429. Incoming webhooks are not signed: the URL is
// the secret. See docs/notifier.md.
package slack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opswire/opswire/services/notifier/internal/chattext"
	"github.com/opswire/opswire/services/notifier/internal/httpx"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
)

// Block Kit limits (characters) and the body budget opswire assumes.
const (
	DefaultBodyLimit = 40000
	HeaderLimit      = 150
	SectionLimit     = 3000
)

// Message is the webhook body: Text is the notification and fallback text,
// Blocks the layout.
type Message struct {
	Text   string  `json:"text"`
	Blocks []Block `json:"blocks"`
}

// Block is one layout block; only the fields of its Type are set.
type Block struct {
	Type     string  `json:"type"`
	Text     *Text   `json:"text,omitempty"`
	Elements []*Text `json:"elements,omitempty"`
}

// Text is a plain_text or mrkdwn text object.
type Text struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Emoji bool   `json:"emoji,omitempty"`
}

// Sink sends to one incoming webhook.
type Sink struct {
	url       config.Secret
	client    *http.Client
	bodyLimit int
	maxRows   int
	now       func() time.Time
}

var _ notify.Sink = (*Sink)(nil)

// Options configure a Sink.
type Options struct {
	URL       config.Secret
	BodyLimit int
	MaxRows   int
	Client    *http.Client
	Now       func() time.Time
}

// New builds a Slack sink; the error never repeats the URL.
func New(o Options) (*Sink, error) {
	if err := httpx.CheckURL(o.URL.Value()); err != nil {
		return nil, err
	}
	s := &Sink{url: o.URL, client: httpx.NoRedirects(o.Client), bodyLimit: o.BodyLimit, maxRows: o.MaxRows, now: o.Now}
	if s.bodyLimit <= 0 {
		s.bodyLimit = DefaultBodyLimit
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// mrkdwn escapes what Slack's mrkdwn parses as control sequences (& < > —
// the last two are already fullwidth after Defuse) and turns the summary's
// **bold** into Slack's *bold*.
var mrkdwn = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "**", "*")

func emoji(sev string) string {
	switch sev {
	case "critical":
		return "🔴"
	case "warning":
		return "🟠"
	}
	return "🔵"
}

// Build renders the message with the first rows rows.
func Build(n *notify.Notification, rows int) Message {
	c := chattext.Build(n, rows)
	header := truncate(emoji(c.Severity)+" ["+c.SeverityLabel+"] "+c.Title, HeaderLimit)
	summary := mrkdwn.Replace(c.Summary)
	m := Message{
		Text: mrkdwn.Replace(header + ": " + firstLine(c.Summary)),
		Blocks: []Block{
			{Type: "header", Text: &Text{Type: "plain_text", Text: header, Emoji: true}},
			{Type: "section", Text: &Text{Type: "mrkdwn", Text: truncate(summary, SectionLimit)}},
		},
	}
	if len(c.Columns) > 0 && (len(c.Rows) > 0 || c.More > 0) {
		var b strings.Builder
		b.WriteString("*" + mrkdwn.Replace(strings.Join(c.Columns, " · ")) + "*")
		for _, r := range c.Rows {
			b.WriteString("\n• " + mrkdwn.Replace(strings.Join(r, " · ")))
		}
		if l := c.MoreLine(); l != "" {
			b.WriteString("\n" + l)
		}
		m.Blocks = append(m.Blocks, Block{Type: "divider"}, Block{Type: "section", Text: &Text{Type: "mrkdwn", Text: b.String()}})
	}
	m.Blocks = append(m.Blocks, Block{Type: "context", Elements: []*Text{{Type: "mrkdwn", Text: mrkdwn.Replace(c.Footer)}}})
	return m
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// tableChars is the length of the table section in characters, which Block
// Kit limits to 3,000.
func tableChars(m Message) int {
	if len(m.Blocks) > 3 && m.Blocks[3].Text != nil {
		return utf8.RuneCountInString(m.Blocks[3].Text.Text)
	}
	return 0
}

// Fit returns the message with as many rows as fit both the body budget and
// the section limit.
func (s *Sink) Fit(n *notify.Notification) (Message, int, error) {
	want := chattext.Want(len(n.Rows), s.maxRows)
	size := func(rows int) int {
		m := Build(n, rows)
		b, _ := json.Marshal(m)
		if tableChars(m) > SectionLimit {
			return s.bodyLimit + 1
		}
		return len(b)
	}
	rows, ok := chattext.Fit(want, s.bodyLimit, size)
	if !ok {
		return Message{}, 0, chattext.TooLarge("message", s.bodyLimit)
	}
	return Build(n, rows), rows, nil
}

// Send makes one attempt.
func (s *Sink) Send(ctx context.Context, n *notify.Notification) (bool, error) {
	m, _, err := s.Fit(n)
	if err != nil {
		return false, err
	}
	a, retry, err := httpx.PostValue(ctx, s.client, s.url.Value(), m)
	if err != nil {
		return retry, err
	}
	retry, err = Classify(a.Status, a.Body)
	var se *notify.SendError
	if errors.As(err, &se) && a.Status == http.StatusTooManyRequests {
		se.RetryAfter = chattext.RetryAfter(a.Header, s.now())
	}
	return retry, err
}

// Classify judges one answer. Slack answers in plain text: "ok" on success,
// an error string otherwise; the string decides where Slack documents it,
// the status otherwise. A 2xx that is not "ok" did not deliver (a proxy
// page): retried.
func Classify(status int, body []byte) (bool, error) {
	answer := strings.TrimSpace(string(body))
	if status >= 200 && status < 300 && answer == "ok" {
		return false, nil
	}
	se := &notify.SendError{Status: status}
	if len(answer) <= 64 && !strings.ContainsAny(answer, " <{\n") {
		se.Msg = answer
	}
	switch se.Msg {
	case "invalid_payload", "no_text", "invalid_blocks", "invalid_blocks_format", "invalid_attachments",
		"too_many_attachments", "posting_to_general_channel_denied", "missing_text_or_fallback_or_attachments",
		"invalid_arguments", "user_not_found":
		se.Reason = notify.ReasonBadRequest
		return false, se
	case "msg_too_long":
		se.Reason = notify.ReasonTooLarge
		return false, se
	case "action_prohibited", "team_disabled", "restricted_action", "channel_is_archived_or_restricted":
		se.Reason = notify.ReasonForbidden
		return false, se
	case "invalid_token", "invalid_auth", "token_revoked", "token_expired":
		se.Reason = notify.ReasonToken
		return false, se
	case "channel_not_found", "no_service", "no_service_id", "no_team", "no_active_hooks", "channel_is_archived":
		se.Reason = notify.ReasonNotFound
		return false, se
	case "rate_limited":
		se.Reason = notify.ReasonRateLimited
		return true, se
	}
	if status >= 200 && status < 300 {
		se.Reason = notify.ReasonBadResponse
		return true, se
	}
	retry, err := chattext.ClassifyStatus(status)
	if e, ok := err.(*notify.SendError); ok {
		e.Msg = se.Msg
	}
	return retry, err
}

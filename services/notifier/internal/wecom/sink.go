// Package wecom is the WeCom group-robot (企业微信群机器人) receiver:
// markdown messages with the same content as the Feishu card, the markdown
// content kept within WeCom's 4,096 bytes, every answer judged by its errcode
// (WeCom answers errors with HTTP 200). WeCom robots are not signed: the key
// in the URL is the secret. See docs/notifier.md.
package wecom

import (
	"context"
	"net/http"
	"strings"

	"github.com/opswire/opswire/services/notifier/internal/chattext"
	"github.com/opswire/opswire/services/notifier/internal/httpx"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
)

// DefaultContentLimit is WeCom's limit on markdown.content, in UTF-8 bytes.
const DefaultContentLimit = 4096

// Message is the request body of a markdown message.
type Message struct {
	MsgType  string   `json:"msgtype"`
	Markdown Markdown `json:"markdown"`
}

// Markdown is the markdown payload.
type Markdown struct {
	Content string `json:"content"`
}

// Sink sends to one WeCom robot.
type Sink struct {
	url     config.Secret
	client  *http.Client
	limit   int
	maxRows int
}

var _ notify.Sink = (*Sink)(nil)

// Options configure a Sink.
type Options struct {
	URL config.Secret
	// ContentLimit bounds markdown.content in bytes (default 4096).
	ContentLimit int
	MaxRows      int
	Client       *http.Client
}

// New builds a WeCom sink; the error never repeats the URL.
func New(o Options) (*Sink, error) {
	if err := httpx.CheckURL(o.URL.Value()); err != nil {
		return nil, err
	}
	s := &Sink{url: o.URL, client: httpx.NoRedirects(o.Client), limit: o.ContentLimit, maxRows: o.MaxRows}
	if s.limit <= 0 {
		s.limit = DefaultContentLimit
	}
	return s, nil
}

// Colour names WeCom markdown knows: info (green), comment (grey), warning (orange-red).
func colour(sev string) string {
	if sev == "critical" || sev == "warning" {
		return "warning"
	}
	return "info"
}

// Build renders the markdown content with the first rows rows. Rows are
// quote lines ("> "), one per row, under a bold column line.
func Build(n *notify.Notification, rows int) string {
	c := chattext.Build(n, rows)
	var b strings.Builder
	b.WriteString(`### <font color="` + colour(c.Severity) + `">[` + c.SeverityLabel + `]</font> ` + c.Title + "\n")
	b.WriteString(c.Summary)
	if len(c.Columns) > 0 && (len(c.Rows) > 0 || c.More > 0) {
		b.WriteString("\n**" + strings.Join(c.Columns, " · ") + "**")
		for _, r := range c.Rows {
			b.WriteString("\n> " + strings.Join(r, " · "))
		}
		if m := c.MoreLine(); m != "" {
			b.WriteString("\n" + m)
		}
	}
	b.WriteString("\n" + `<font color="comment">` + c.Footer + `</font>`)
	return b.String()
}

// Fit returns the content with as many rows as fit the content limit.
func (s *Sink) Fit(n *notify.Notification) (string, int, error) {
	want := chattext.Want(len(n.Rows), s.maxRows)
	rows, ok := chattext.Fit(want, s.limit, func(rows int) int { return len(Build(n, rows)) })
	if !ok {
		return "", 0, chattext.TooLarge("markdown content", s.limit)
	}
	return Build(n, rows), rows, nil
}

// Send makes one attempt.
func (s *Sink) Send(ctx context.Context, n *notify.Notification) (bool, error) {
	content, _, err := s.Fit(n)
	if err != nil {
		return false, err
	}
	a, retry, err := httpx.PostValue(ctx, s.client, s.url.Value(), Message{MsgType: "markdown", Markdown: Markdown{Content: content}})
	if err != nil {
		return retry, err
	}
	return Classify(a.Status, a.Body)
}

// WeCom codes with a meaning of their own.
const (
	CodeOK            = 0
	CodeBusy          = -1    // 系统繁忙
	CodeFreq          = 45009 // api freq out of limit
	CodeConcurrent    = 45033 // api concurrent out of limit
	CodeInvalidURL    = 93000 // invalid webhook url
	CodeBadMsgType    = 40008 // invalid message type
	CodeInvalidParam  = 40058 // invalid parameter (e.g. markdown.content exceed max length 4096)
	CodeEmptyContent  = 44004 // empty content
	CodeInvalidKey    = 40001 // invalid credential
	CodeNotInGroup    = 93004 // the robot is no longer in the chat
	CodeRobotDisabled = 93008 // the robot is disabled
)

// Classify judges one answer.
func Classify(status int, body []byte) (bool, error) {
	return chattext.ClassifyErrcode(status, body, func(code int, msg string) (chattext.CodeRule, bool) {
		switch code {
		case CodeBusy:
			return chattext.CodeRule{Reason: notify.ReasonServer, Retryable: true}, true
		case CodeFreq, CodeConcurrent:
			return chattext.CodeRule{Reason: notify.ReasonRateLimited, Retryable: true}, true
		case CodeInvalidURL, CodeInvalidKey, CodeNotInGroup, CodeRobotDisabled:
			return chattext.CodeRule{Reason: notify.ReasonToken}, true
		case CodeInvalidParam:
			if m := strings.ToLower(msg); strings.Contains(m, "exceed") || strings.Contains(m, "length") {
				return chattext.CodeRule{Reason: notify.ReasonTooLarge}, true
			}
			return chattext.CodeRule{Reason: notify.ReasonBadRequest}, true
		case CodeBadMsgType, CodeEmptyContent:
			return chattext.CodeRule{Reason: notify.ReasonBadRequest}, true
		}
		return chattext.CodeRule{}, false
	})
}

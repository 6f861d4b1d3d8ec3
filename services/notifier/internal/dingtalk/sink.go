// Package dingtalk is the DingTalk custom-robot (钉钉自定义机器人) receiver:
// markdown messages with the same content as the Feishu card, signed (加签)
// in the query string on every attempt, kept under the body budget, and
// every answer judged by its errcode (DingTalk answers errors with HTTP 200).
// See docs/notifier.md.
package dingtalk

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/chattext"
	"github.com/opswire/opswire/services/notifier/internal/httpx"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
)

// DefaultBodyLimit is the request budget: DingTalk refuses longer messages
// with errcode 460101 "message too long, exceed 20000 bytes".
const DefaultBodyLimit = 20000

// Message is the request body of a markdown message. At is always sent
// with isAtAll false and no mobiles: opswire never mentions anyone.
type Message struct {
	MsgType  string   `json:"msgtype"`
	Markdown Markdown `json:"markdown"`
	At       At       `json:"at"`
}

// Markdown is the markdown payload; Title is what the notification list
// and the chat preview show.
type Markdown struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// At names who is mentioned; opswire leaves it empty.
type At struct {
	AtMobiles []string `json:"atMobiles"`
	AtUserIDs []string `json:"atUserIds"`
	IsAtAll   bool     `json:"isAtAll"`
}

// Sink sends to one DingTalk robot.
type Sink struct {
	url       config.Secret
	secret    config.Secret
	keyword   string
	client    *http.Client
	bodyLimit int
	maxRows   int
	now       func() time.Time
}

var _ notify.Sink = (*Sink)(nil)

// Options configure a Sink.
type Options struct {
	URL       config.Secret
	Secret    config.Secret // the robot's SEC… signing secret; empty: unsigned
	Keyword   string        // for robots with keyword security
	BodyLimit int
	MaxRows   int // 0: as many as fit
	Client    *http.Client
	Now       func() time.Time
}

// New builds a DingTalk sink; the error never repeats the URL.
func New(o Options) (*Sink, error) {
	if err := httpx.CheckURL(o.URL.Value()); err != nil {
		return nil, err
	}
	s := &Sink{url: o.URL, secret: o.Secret, keyword: o.Keyword, client: httpx.NoRedirects(o.Client), bodyLimit: o.BodyLimit, maxRows: o.MaxRows, now: o.Now}
	if s.bodyLimit <= 0 {
		s.bodyLimit = DefaultBodyLimit
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Sign is DingTalk's signature: HMAC-SHA256 keyed with the secret over
// "<timestamp ms>\n<secret>", standard Base64 (the caller URL-encodes it).
// Feishu differs: seconds, and the key is the string, the message empty.
func Sign(secret string, timestampMs int64) string {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(strconv.FormatInt(timestampMs, 10) + "\n" + secret))
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// Build renders a notification with its first rows rows.
func Build(n *notify.Notification, keyword string, rows int) Message {
	c := chattext.Build(n, rows)
	title := c.Title
	if keyword != "" && !strings.Contains(title, keyword) {
		title = "[" + keyword + "] " + title
	}
	var b strings.Builder
	b.WriteString("#### " + severityMark(c.Severity, c.SeverityLabel) + " " + title + "\n\n")
	// DingTalk markdown needs a blank line for a line break.
	b.WriteString(strings.ReplaceAll(c.Summary, "\n", "\n\n"))
	if len(c.Columns) > 0 && (len(c.Rows) > 0 || c.More > 0) {
		b.WriteString("\n\n---\n\n**" + strings.Join(c.Columns, " · ") + "**\n")
		for _, r := range c.Rows {
			b.WriteString("\n- " + strings.Join(r, " · "))
		}
		if m := c.MoreLine(); m != "" {
			b.WriteString("\n\n" + m)
		}
	}
	footer := c.Footer
	if keyword != "" {
		footer += " · " + keyword
	}
	b.WriteString("\n\n---\n\n###### " + footer)
	return Message{MsgType: "markdown", Markdown: Markdown{Title: title, Text: b.String()}, At: At{AtMobiles: []string{}, AtUserIDs: []string{}}}
}

// severityMark is the coloured dot and label that start the title.
func severityMark(sev, label string) string {
	switch sev {
	case "critical":
		return "🔴 [" + label + "]"
	case "warning":
		return "🟠 [" + label + "]"
	}
	return "🔵 [" + label + "]"
}

// Fit returns the message with as many rows as fit the body budget and how
// many rows it shows.
func (s *Sink) Fit(n *notify.Notification) (Message, int, error) {
	want := chattext.Want(len(n.Rows), s.maxRows)
	size := func(rows int) int {
		b, _ := json.Marshal(Build(n, s.keyword, rows))
		return len(b)
	}
	rows, ok := chattext.Fit(want, s.bodyLimit, size)
	if !ok {
		return Message{}, 0, chattext.TooLarge("message", s.bodyLimit)
	}
	return Build(n, s.keyword, rows), rows, nil
}

// Send makes one attempt, signed with the current time.
func (s *Sink) Send(ctx context.Context, n *notify.Notification) (bool, error) {
	m, _, err := s.Fit(n)
	if err != nil {
		return false, err
	}
	target := s.url.Value()
	if s.secret.IsSet() {
		target = SignURL(target, s.secret.Value(), s.now())
	}
	a, retry, err := httpx.PostValue(ctx, s.client, target, m)
	if err != nil {
		return retry, err
	}
	return Classify(a.Status, a.Body)
}

// SignURL appends timestamp and sign to the webhook URL's query, replacing
// any already there (a URL copied from an earlier signed request).
func SignURL(raw, secret string, now time.Time) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	ts := now.UnixMilli()
	q := u.Query()
	q.Set("timestamp", strconv.FormatInt(ts, 10))
	q.Set("sign", Sign(secret, ts))
	u.RawQuery = q.Encode()
	return u.String()
}

// DingTalk codes with a meaning of their own.
const (
	CodeOK        = 0
	CodeBusy      = -1     // 系统繁忙
	CodeSecurity  = 310000 // keywords not in content / invalid timestamp / sign not match / ip not in whitelist
	CodeTooFast   = 130101 // send too fast, exceed 20 times per minute
	CodeTooFast2  = 410100 // 发送速度太快而限流
	CodeTooLong   = 460101 // message too long
	CodeNoToken   = 300001 // token is not exist
	CodeBadToken  = 300005 // token is not exist (another form)
	CodeNoRobot   = 400101 // access_token 不存在
	CodeStopped   = 400102 // 机器人已停用
	CodeBadParams = 40035  // 缺少参数 (missing parameter)
)

// Classify judges one answer.
func Classify(status int, body []byte) (bool, error) {
	return chattext.ClassifyErrcode(status, body, func(code int, msg string) (chattext.CodeRule, bool) {
		switch code {
		case CodeBusy:
			return chattext.CodeRule{Reason: notify.ReasonServer, Retryable: true}, true
		case CodeTooFast, CodeTooFast2:
			return chattext.CodeRule{Reason: notify.ReasonRateLimited, Retryable: true}, true
		case CodeTooLong:
			return chattext.CodeRule{Reason: notify.ReasonTooLarge}, true
		case CodeNoToken, CodeBadToken, CodeNoRobot, CodeStopped:
			return chattext.CodeRule{Reason: notify.ReasonToken}, true
		case CodeBadParams:
			return chattext.CodeRule{Reason: notify.ReasonBadRequest}, true
		case CodeSecurity:
			m := strings.ToLower(msg)
			switch {
			case strings.Contains(m, "keyword"):
				return chattext.CodeRule{Reason: notify.ReasonKeyword}, true
			case strings.Contains(m, "sign") || strings.Contains(m, "timestamp"):
				return chattext.CodeRule{Reason: notify.ReasonSignature}, true
			case strings.Contains(m, "ip") || strings.Contains(m, "whitelist"):
				return chattext.CodeRule{Reason: notify.ReasonIPRejected}, true
			}
			return chattext.CodeRule{Reason: notify.ReasonBadRequest}, true
		}
		return chattext.CodeRule{}, false
	})
}

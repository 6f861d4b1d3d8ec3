// Package teams is the Microsoft Teams receiver: an Adaptive Card (1.4) in a
// message attachment, posted to a Workflows webhook ("Post to a channel when
// a webhook request is received"; the retired Office 365 incoming webhooks
// take the same body). The card has the same content as the Feishu card and
// is kept within Teams' ~28 KB message size, because a Workflows webhook
// answers 202 Accepted before it posts: a card Teams refuses later is lost
// without an error, so the budget must hold before sending. Every answer is
// judged by its HTTP status (and, for the legacy webhook, the text it answers
// with HTTP 200). The URL (with its sig parameter) is the secret.
package teams

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/chattext"
	"github.com/opswire/opswire/services/notifier/internal/httpx"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
)

// DefaultBodyLimit stays under Teams' message size limit of about 28 KB.
const DefaultBodyLimit = 28000

// ContentType is the attachment type of an Adaptive Card.
const ContentType = "application/vnd.microsoft.card.adaptive"

// Message is the webhook body.
type Message struct {
	Type        string       `json:"type"`
	Attachments []Attachment `json:"attachments"`
}

// Attachment carries the card.
type Attachment struct {
	ContentType string  `json:"contentType"`
	ContentURL  *string `json:"contentUrl"`
	Content     Card    `json:"content"`
}

// Card is an Adaptive Card.
type Card struct {
	Schema  string    `json:"$schema"`
	Type    string    `json:"type"`
	Version string    `json:"version"`
	Body    []Element `json:"body"`
	MSTeams MSTeams   `json:"msteams"`
}

// MSTeams holds Teams-specific card settings; Entities (mentions) is never set.
type MSTeams struct {
	Width string `json:"width"`
}

// Element is a TextBlock.
type Element struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Wrap     bool   `json:"wrap"`
	Size     string `json:"size,omitempty"`
	Weight   string `json:"weight,omitempty"`
	Color    string `json:"color,omitempty"`
	IsSubtle bool   `json:"isSubtle,omitempty"`
	Spacing  string `json:"spacing,omitempty"`
}

// Sink posts to one Teams webhook.
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

// New builds a Teams sink; the error never repeats the URL.
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

func colour(sev string) string {
	switch sev {
	case "critical":
		return "Attention"
	case "warning":
		return "Warning"
	}
	return "Accent"
}

// Build renders the card with the first rows rows: one TextBlock per
// summary line and per row, so no line-break rule of any client matters.
func Build(n *notify.Notification, rows int) Message {
	c := chattext.Build(n, rows)
	body := []Element{{Type: "TextBlock", Text: "[" + c.SeverityLabel + "] " + c.Title, Wrap: true, Size: "Large", Weight: "Bolder", Color: colour(c.Severity)}}
	for _, l := range strings.Split(c.Summary, "\n") {
		if l != "" {
			body = append(body, Element{Type: "TextBlock", Text: l, Wrap: true, Spacing: "Small"})
		}
	}
	if len(c.Columns) > 0 && (len(c.Rows) > 0 || c.More > 0) {
		body = append(body, Element{Type: "TextBlock", Text: "**" + strings.Join(c.Columns, " · ") + "**", Wrap: true, Spacing: "Medium"})
		for _, r := range c.Rows {
			body = append(body, Element{Type: "TextBlock", Text: strings.Join(r, " · "), Wrap: true, Spacing: "None"})
		}
		if l := c.MoreLine(); l != "" {
			body = append(body, Element{Type: "TextBlock", Text: l, Wrap: true, IsSubtle: true, Spacing: "Small"})
		}
	}
	body = append(body, Element{Type: "TextBlock", Text: c.Footer, Wrap: true, Size: "Small", IsSubtle: true, Spacing: "Medium"})
	return Message{Type: "message", Attachments: []Attachment{{ContentType: ContentType, Content: Card{
		Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: "1.4", Body: body, MSTeams: MSTeams{Width: "Full"},
	}}}}
}

// Fit returns the card with as many rows as fit the body budget.
func (s *Sink) Fit(n *notify.Notification) (Message, int, error) {
	want := chattext.Want(len(n.Rows), s.maxRows)
	rows, ok := chattext.Fit(want, s.bodyLimit, func(rows int) int {
		b, _ := json.Marshal(Build(n, rows))
		return len(b)
	})
	if !ok {
		return Message{}, 0, chattext.TooLarge("card", s.bodyLimit)
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
	if errors.As(err, &se) && se.Reason == notify.ReasonRateLimited {
		se.RetryAfter = chattext.RetryAfter(a.Header, s.now())
	}
	return retry, err
}

// legacyError is how the retired Office 365 incoming webhook reported a
// failure behind HTTP 200: "… Microsoft Teams endpoint returned HTTP error
// 429 with ContextId …".
var legacyError = regexp.MustCompile(`returned HTTP error (\d{3})`)

// Classify judges one answer: 202 (Workflows) or 200 (legacy webhook, body
// "1" or empty) is delivered; a 200 whose text reports an HTTP error is
// judged by that error; otherwise the status decides. Power Automate's JSON
// error code ({"error":{"code":…}}) is kept as the message.
func Classify(status int, body []byte) (bool, error) {
	text := strings.TrimSpace(string(body))
	if status >= 200 && status < 300 {
		if m := legacyError.FindStringSubmatch(text); m != nil {
			inner, _ := strconv.Atoi(m[1])
			retry, err := chattext.ClassifyStatus(inner)
			if err == nil { // "returned HTTP error 2xx" is not a delivery either
				return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Msg: "legacy webhook error " + m[1]}
			}
			err.(*notify.SendError).Msg = "legacy webhook error " + m[1]
			return retry, err
		}
		if status == http.StatusAccepted || text == "" || text == "1" || strings.HasPrefix(text, "{") {
			return false, nil
		}
		return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Err: errors.New("unexpected answer")}
	}
	retry, err := chattext.ClassifyStatus(status)
	var pa struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &pa) == nil && pa.Error.Code != "" {
		se := err.(*notify.SendError)
		se.Msg = pa.Error.Code
		switch pa.Error.Code {
		case "WorkflowNotFound", "TriggerNotFound", "WorkflowTriggerNotFound":
			se.Reason = notify.ReasonNotFound
		case "DirectApiAuthorizationRequired", "DirectApiInvalidAuthorizationScheme", "Unauthorized", "AuthorizationFailed":
			se.Reason = notify.ReasonToken
		case "WorkflowDisabled", "FlowDisabled":
			se.Reason = notify.ReasonForbidden
		}
	}
	return retry, err
}

package feishu

import (
	"strings"

	"github.com/opswire/opswire/services/notifier/internal/chattext"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/events"
)

// Message is the webhook request body. Timestamp and Sign are set only for
// bots with signature verification.
type Message struct {
	Timestamp string `json:"timestamp,omitempty"`
	Sign      string `json:"sign,omitempty"`
	MsgType   string `json:"msg_type"`
	Card      *Card  `json:"card"`
}

// Card is a card in JSON 1.0 (no schema field), which every Feishu client
// renders; 2.0 rejects unknown attributes and needs a recent client.
type Card struct {
	Config   CardConfig `json:"config"`
	Header   Header     `json:"header"`
	Elements []Element  `json:"elements"`
}

// CardConfig holds card-level settings.
type CardConfig struct {
	WideScreenMode bool `json:"wide_screen_mode"`
}

// Header is the coloured card title.
type Header struct {
	Title    Text   `json:"title"`
	Template string `json:"template"`
}

// Text is a plain_text or lark_md text object.
type Text struct {
	Tag     string `json:"tag"`
	Content string `json:"content"`
}

// Element is one card element; only the fields of its Tag are set
// (markdown: Content; hr: none; note: Elements).
type Element struct {
	Tag      string `json:"tag"`
	Content  string `json:"content,omitempty"`
	Elements []Text `json:"elements,omitempty"`
}

// Template returns the header colour of a severity (Feishu's colour enum).
func Template(s events.Severity) string {
	switch s {
	case events.SeverityCritical:
		return "red"
	case events.SeverityWarning:
		return "orange"
	}
	return "blue"
}

// BuildCard renders a notification with its first rows rows. A keyword
// (keyword security) goes into the header title and into the footer note's
// text: Feishu documents that the check applies to "text, title" values and
// does not say which card fields it scans (feishu-webhook.md §2.2), so the
// keyword is in a text element as well as in the title. Card JSON 1.0
// markdown has no tables, so the table is one line per row with the cells
// separated by " · " under a bold header line, which reads as a table in the
// client and survives narrow (mobile) screens.
func BuildCard(n *notify.Notification, keyword string, rows int) *Card {
	title := n.Title
	if keyword != "" && !strings.Contains(title, keyword) {
		// Keyword security scans text fields; the title is always one.
		title = "[" + keyword + "] " + title
	}
	c := &Card{
		Config: CardConfig{WideScreenMode: true},
		Header: Header{Title: Text{Tag: "plain_text", Content: title}, Template: Template(n.Severity)},
	}
	c.Elements = append(c.Elements, Element{Tag: "markdown", Content: n.Summary})
	if rows > len(n.Rows) {
		rows = len(n.Rows)
	}
	if len(n.Columns) > 0 && len(n.Rows) > 0 {
		var b strings.Builder
		b.WriteString("**" + strings.Join(n.Columns, " · ") + "**")
		for _, r := range n.Rows[:rows] {
			b.WriteString("\n" + strings.Join(r, " · "))
		}
		if m := chattext.MoreLine(n.Locale, len(n.Rows)-rows+n.Omitted); m != "" {
			b.WriteString("\n" + m)
		}
		c.Elements = append(c.Elements, Element{Tag: "hr"}, Element{Tag: "markdown", Content: b.String()})
	}
	footer := chattext.Footer(n.Locale, n.Cluster, n.Time, string(n.Severity))
	if keyword != "" {
		footer += " · " + keyword
	}
	c.Elements = append(c.Elements, Element{Tag: "note", Elements: []Text{{Tag: "plain_text", Content: footer}}})
	return c
}

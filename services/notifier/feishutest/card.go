package feishutest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Card is a parsed card in JSON 1.0.
type Card struct {
	Config   map[string]any `json:"config"`
	Header   *Header        `json:"header"`
	Elements []Element      `json:"elements"`
	Schema   string         `json:"schema"`
}

// Header is the card header.
type Header struct {
	Title    Text   `json:"title"`
	Template string `json:"template"`
}

// Text is a text object.
type Text struct {
	Tag     string `json:"tag"`
	Content string `json:"content"`
}

// Element is any element of the 1.0 elements the notifier may use.
type Element struct {
	Tag      string  `json:"tag"`
	Content  string  `json:"content"`
	Text     *Text   `json:"text"`
	Fields   []Field `json:"fields"`
	Elements []Text  `json:"elements"`
}

// Field is a div field.
type Field struct {
	IsShort bool `json:"is_short"`
	Text    Text `json:"text"`
}

// templates is the header colour enum.
var templates = map[string]bool{"blue": true, "wathet": true, "turquoise": true, "green": true, "yellow": true,
	"orange": true, "red": true, "carmine": true, "violet": true, "purple": true, "indigo": true, "grey": true, "default": true}

// ParseCard decodes and validates a JSON 1.0 card: an object (not a
// string), a plain_text title, a colour from the enum, and elements of the
// documented 1.0 tags with their required fields.
func ParseCard(raw json.RawMessage) (*Card, error) {
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("card must be a JSON object")
	}
	var c Card
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("card: %v", err)
	}
	if c.Schema != "" {
		return nil, fmt.Errorf("schema %q: expected a JSON 1.0 card", c.Schema)
	}
	if c.Header == nil || c.Header.Title.Tag != "plain_text" || c.Header.Title.Content == "" {
		return nil, errors.New("header.title must be a non-empty plain_text")
	}
	if c.Header.Template != "" && !templates[c.Header.Template] {
		return nil, fmt.Errorf("header.template %q is not a Feishu colour", c.Header.Template)
	}
	if len(c.Elements) == 0 || len(c.Elements) > 200 {
		return nil, fmt.Errorf("%d elements (want 1..200)", len(c.Elements))
	}
	for i, e := range c.Elements {
		switch e.Tag {
		case "markdown":
			if e.Content == "" {
				return nil, fmt.Errorf("elements[%d]: empty markdown", i)
			}
		case "hr":
		case "div":
			if e.Text == nil && len(e.Fields) == 0 {
				return nil, fmt.Errorf("elements[%d]: div without text or fields", i)
			}
		case "note":
			if len(e.Elements) == 0 {
				return nil, fmt.Errorf("elements[%d]: empty note", i)
			}
			for _, t := range e.Elements {
				if t.Tag != "plain_text" && t.Tag != "lark_md" {
					return nil, fmt.Errorf("elements[%d]: note element tag %q", i, t.Tag)
				}
			}
		default:
			return nil, fmt.Errorf("elements[%d]: tag %q is not a JSON 1.0 element the notifier uses", i, e.Tag)
		}
	}
	return &c, nil
}

// BodyText is the text of the card's elements, without the header: where
// the keyword check of this server looks. Feishu does not document which
// card fields its check scans, so the server takes the strictest reading and
// a title-only keyword is refused.
func (c *Card) BodyText() string {
	t := c.Text()
	_, body, _ := strings.Cut(t, "\n")
	return body
}

// Title is the header title.
func (c *Card) Title() string { return c.Header.Title.Content }

// Text renders the card as terminal text: the title, every markdown or text
// element, "----" for rules and the note.
func (c *Card) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] %s\n", c.Header.Template, c.Header.Title.Content)
	for _, e := range c.Elements {
		switch e.Tag {
		case "markdown":
			b.WriteString(e.Content + "\n")
		case "div":
			if e.Text != nil {
				b.WriteString(e.Text.Content + "\n")
			}
			for _, f := range e.Fields {
				b.WriteString(f.Text.Content + "\n")
			}
		case "hr":
			b.WriteString("----\n")
		case "note":
			for _, t := range e.Elements {
				b.WriteString(t.Content + "\n")
			}
		}
	}
	return b.String()
}

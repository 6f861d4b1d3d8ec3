// Package slacktest is a Slack-compatible incoming-webhook server for
// tests. It checks what Slack checks, with Slack's plain-text answers:
//
//   - the path names a hook (404 "no_service"), the method is POST;
//   - at most PerSecond messages in any one-second window per hook; more is
//     429 "rate_limited" with Retry-After: 1 (Slack: 1 per second, short
//     bursts tolerated; this server tolerates none, which is stricter);
//   - the body parsed as Block Kit: JSON (400 "invalid_payload"), text or
//     blocks present (400 "no_text"), at most 50 blocks of known types,
//     header plain_text ≤ 150 characters, section text ≤ 3,000, context
//     elements ≤ 10 (400 "invalid_blocks"), text ≤ 40,000 characters
//     (400 "msg_too_long");
//   - "ok" with HTTP 200 on success.
//
// It records whether a message could mention someone or link: <!…>, <@…>,
// <#…>, <http…> in mrkdwn, which opswire must never send.
package slacktest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/opswire/opswire/services/notifier/internal/chattest"
)

// Slack's limits.
const (
	PerSecond   = 1
	MaxBlocks   = 50
	HeaderChars = 150
	SectionText = 3000
	TextChars   = 40000
	PathPrefix  = "/services/"
)

// Message is an accepted message.
type Message struct {
	Text     string
	Header   string
	Sections []string
	Context  []string
	Mentions bool
}

var control = regexp.MustCompile(`<[!@#]|<https?:|<mailto:`)

// Table returns the rows listed ("• " lines) and the "…and N more" count.
func (m Message) Table() (rows, more int) {
	all := strings.Join(m.Sections, "\n")
	return chattest.Table(all, "• ")
}

// All returns every text of the message, one per line.
func (m Message) All() string {
	return strings.Join(append(append([]string{m.Text, m.Header}, m.Sections...), m.Context...), "\n")
}

// Request is one recorded request.
type Request struct {
	Hook   string
	Time   time.Time
	Status int
	Answer string
}

// Server is the fake Slack.
type Server struct {
	*httptest.Server
	Now func() time.Time

	mu    sync.Mutex
	hooks map[string][]time.Time
	book  chattest.Book[Request, Message]
}

// NewServer starts a server.
func NewServer() *Server {
	s := &Server{Now: time.Now, hooks: map[string][]time.Time{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// AddHook registers a hook ("T000/B000/XXXX") and returns its URL.
func (s *Server) AddHook(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks[path] = nil
	return s.URL + PathPrefix + path
}

// Messages returns a hook's accepted messages.
func (s *Server) Messages(path string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.Messages(path)
}

// Count returns how many requests got the answer.
func (s *Server) Count(answer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.Count(func(r Request) bool { return r.Answer == answer })
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body := chattest.ReadBody(r, 4<<20)
	now := s.Now()
	hook := strings.TrimPrefix(r.URL.Path, PathPrefix)
	s.mu.Lock()
	status, answer, m := s.judge(r, hook, body, now)
	s.book.Record(Request{Hook: hook, Time: now, Status: status, Answer: answer}, hook, m, status == http.StatusOK)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/html")
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, answer)
}

type text struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (s *Server) judge(r *http.Request, hook string, body []byte, now time.Time) (int, string, Message) {
	arrivals, ok := s.hooks[hook]
	if r.Method != http.MethodPost || !ok {
		return http.StatusNotFound, "no_service", Message{}
	}
	arrivals = chattest.Slide(arrivals, now, time.Second)
	s.hooks[hook] = arrivals
	if len(arrivals) > PerSecond {
		return http.StatusTooManyRequests, "rate_limited", Message{}
	}
	var p struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type     string `json:"type"`
			Text     *text  `json:"text"`
			Elements []text `json:"elements"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return http.StatusBadRequest, "invalid_payload", Message{}
	}
	if p.Text == "" && len(p.Blocks) == 0 {
		return http.StatusBadRequest, "no_text", Message{}
	}
	if utf8.RuneCountInString(p.Text) > TextChars {
		return http.StatusBadRequest, "msg_too_long", Message{}
	}
	if len(p.Blocks) > MaxBlocks {
		return http.StatusBadRequest, "invalid_blocks", Message{}
	}
	m := Message{Text: p.Text}
	for _, b := range p.Blocks {
		switch b.Type {
		case "header":
			if b.Text == nil || b.Text.Type != "plain_text" || b.Text.Text == "" || utf8.RuneCountInString(b.Text.Text) > HeaderChars {
				return http.StatusBadRequest, "invalid_blocks", Message{}
			}
			m.Header = b.Text.Text
		case "section":
			if b.Text == nil || (b.Text.Type != "mrkdwn" && b.Text.Type != "plain_text") || b.Text.Text == "" || utf8.RuneCountInString(b.Text.Text) > SectionText {
				return http.StatusBadRequest, "invalid_blocks", Message{}
			}
			m.Sections = append(m.Sections, b.Text.Text)
		case "context":
			if len(b.Elements) == 0 || len(b.Elements) > 10 {
				return http.StatusBadRequest, "invalid_blocks", Message{}
			}
			for _, e := range b.Elements {
				if e.Text == "" || (e.Type != "mrkdwn" && e.Type != "plain_text") {
					return http.StatusBadRequest, "invalid_blocks", Message{}
				}
				m.Context = append(m.Context, e.Text)
			}
		case "divider":
		default:
			return http.StatusBadRequest, "invalid_blocks", Message{}
		}
	}
	m.Mentions = control.MatchString(m.All()) || strings.Contains(m.All(), "@channel") || strings.Contains(m.All(), "@here")
	return http.StatusOK, "ok", m
}

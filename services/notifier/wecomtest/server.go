// Package wecomtest is a WeCom-compatible group-robot webhook server for
// tests. It checks what WeCom checks, with WeCom's answers (HTTP 200 and an
// errcode):
//
//   - the key names a robot (93000 "invalid webhook url");
//   - 20 messages per minute per robot over a sliding window of arrivals
//     (45009 "api freq out of limit");
//   - the body parsed as WeCom does: msgtype (40008 "invalid message type"),
//     markdown.content present (44004 "empty content") and at most 4,096
//     UTF-8 bytes (40058 "markdown.content exceed max length 4096").
//
// It also records whether a message would mention someone (<@userid>, a
// mentioned_list), which opswire must never do.
package wecomtest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/chattest"
)

// WeCom's documented limits.
const (
	ContentLimit = 4096
	PerMinute    = 20
	Path         = "/cgi-bin/webhook/send"
)

// Codes answered.
const (
	CodeOK           = 0
	CodeFreq         = 45009
	CodeInvalidURL   = 93000
	CodeBadMsgType   = 40008
	CodeInvalidParam = 40058
	CodeEmptyContent = 44004
)

// Message is an accepted markdown message.
type Message struct {
	Content  string
	Mentions bool // <@userid> in the content or a mentioned list
}

// Table returns the rows listed (quote lines) and the "…and N more" count.
func (m Message) Table() (rows, more int) {
	return chattest.Table(m.Content, "> ")
}

// Request is one recorded request.
type Request struct {
	Key  string
	Time time.Time
	Code int
	Msg  string
}

// Server is the fake WeCom.
type Server struct {
	*httptest.Server
	Now func() time.Time

	mu     sync.Mutex
	robots map[string][]time.Time
	book   chattest.Book[Request, Message]
}

// NewServer starts a server.
func NewServer() *Server {
	s := &Server{Now: time.Now, robots: map[string][]time.Time{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// AddRobot registers a robot and returns its webhook URL.
func (s *Server) AddRobot(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.robots[key] = nil
	return s.URL + Path + "?key=" + key
}

// Messages returns a robot's accepted messages.
func (s *Server) Messages(key string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.Messages(key)
}

// Count returns how many requests were answered with code.
func (s *Server) Count(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.Count(func(r Request) bool { return r.Code == code })
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body := chattest.ReadBody(r, 1<<20)
	now := s.Now()
	key := r.URL.Query().Get("key")
	s.mu.Lock()
	code, msg, m := s.judge(r, key, body, now)
	s.book.Record(Request{Key: key, Time: now, Code: code, Msg: msg}, key, m, code == CodeOK)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"errcode": code, "errmsg": msg})
}

func (s *Server) judge(r *http.Request, key string, body []byte, now time.Time) (int, string, Message) {
	arrivals, ok := s.robots[key]
	if r.Method != http.MethodPost || r.URL.Path != Path || !ok {
		return CodeInvalidURL, "invalid webhook url, hint: [1700000000_1_abc], from ip: 127.0.0.1", Message{}
	}
	arrivals = chattest.Slide(arrivals, now, time.Minute)
	s.robots[key] = arrivals
	if len(arrivals) > PerMinute {
		return CodeFreq, "api freq out of limit", Message{}
	}
	var p struct {
		MsgType  string `json:"msgtype"`
		Markdown *struct {
			Content string `json:"content"`
		} `json:"markdown"`
		Text *struct {
			Content       string   `json:"content"`
			MentionedList []string `json:"mentioned_list"`
		} `json:"text"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return 40035, "invalid parameter, not json", Message{}
	}
	var m Message
	switch p.MsgType {
	case "markdown":
		if p.Markdown == nil || p.Markdown.Content == "" {
			return CodeEmptyContent, "empty content", Message{}
		}
		if len(p.Markdown.Content) > ContentLimit {
			return CodeInvalidParam, "markdown.content exceed max length 4096", Message{}
		}
		m.Content = p.Markdown.Content
	case "text":
		if p.Text == nil || p.Text.Content == "" {
			return CodeEmptyContent, "empty content", Message{}
		}
		m.Content, m.Mentions = p.Text.Content, len(p.Text.MentionedList) > 0
	default:
		return CodeBadMsgType, "invalid message type", Message{}
	}
	if strings.Contains(m.Content, "<@") {
		m.Mentions = true
	}
	return CodeOK, "ok", m
}

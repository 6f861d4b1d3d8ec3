// Package dingtalktest is a DingTalk-compatible custom-robot webhook server
// for tests. It checks what DingTalk checks, with DingTalk's answers (HTTP
// 200 and an errcode):
//
//   - the access_token names a robot (300001 "token is not exist");
//   - 加签: timestamp (ms) within one hour of the server's clock and sign =
//     Base64(HMAC-SHA256(key=secret, "<timestamp>\n<secret>")), read from the
//     query string (310000 "invalid timestamp" / "sign not match");
//   - 20 messages per minute per robot, counted over a sliding window of
//     arrivals; going over throttles the robot for Throttle (DingTalk: 10
//     minutes) with 130101 "send too fast, exceed 20 times per minute";
//   - a body over 20,000 bytes: 460101 "message too long";
//   - the body parsed as DingTalk does: msgtype, and for markdown a title and
//     a text (40035 "缺少参数" otherwise); keyword security over title and
//     text (310000 "keywords not in content").
//
// The signature code is written independently of the sink's.
package dingtalktest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/chattest"
)

// DingTalk's documented limits.
const (
	BodyLimit      = 20000
	PerMinute      = 20
	TimestampSlack = time.Hour
	Path           = "/robot/send"
)

// Codes answered.
const (
	CodeOK        = 0
	CodeSecurity  = 310000
	CodeTooFast   = 130101
	CodeTooLong   = 460101
	CodeNoToken   = 300001
	CodeBadParams = 40035
)

// Robot is one robot's security settings.
type Robot struct {
	Secret   string
	Keywords []string
}

// Message is an accepted markdown message.
type Message struct {
	Title   string
	Text    string
	IsAtAll bool
	Mobiles []string
}

// Table returns how many table rows the message lists and what its
// "…and N more" line says (0 without one).
func (m Message) Table() (rows, more int) {
	return chattest.Table(m.Text, "- ")
}

// Request is one recorded request.
type Request struct {
	Token  string
	Time   time.Time
	Size   int
	Code   int
	Msg    string
	Signed bool
}

// Server is the fake DingTalk.
type Server struct {
	*httptest.Server
	Now      func() time.Time
	Throttle time.Duration

	mu     sync.Mutex
	robots map[string]*robot
	book   chattest.Book[Request, Message]
}

type robot struct {
	Robot
	arrivals  []time.Time
	blockedTo time.Time
}

// NewServer starts a server.
func NewServer() *Server {
	s := &Server{Now: time.Now, Throttle: 10 * time.Minute, robots: map[string]*robot{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// AddRobot registers a robot and returns its webhook URL.
func (s *Server) AddRobot(token string, r Robot) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.robots[token] = &robot{Robot: r}
	return s.URL + Path + "?access_token=" + token
}

// Messages returns a robot's accepted messages in arrival order.
func (s *Server) Messages(token string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.Messages(token)
}

// Requests returns every recorded request.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.book.Requests()
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
	q := r.URL.Query()
	token := q.Get("access_token")
	s.mu.Lock()
	code, msg, m := s.judge(r, q, token, body, now)
	s.book.Record(Request{Token: token, Time: now, Size: len(body), Code: code, Msg: msg, Signed: q.Get("sign") != ""}, token, m, code == CodeOK)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json;charset=utf-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"errcode": code, "errmsg": msg})
}

func (s *Server) judge(r *http.Request, q map[string][]string, token string, body []byte, now time.Time) (int, string, Message) {
	rb, ok := s.robots[token]
	if r.Method != http.MethodPost || r.URL.Path != Path || !ok {
		return CodeNoToken, "token is not exist", Message{}
	}
	if now.Before(rb.blockedTo) {
		return CodeTooFast, "send too fast, exceed 20 times per minute", Message{}
	}
	rb.arrivals = chattest.Slide(rb.arrivals, now, time.Minute)
	if len(rb.arrivals) > PerMinute {
		rb.blockedTo = now.Add(s.Throttle)
		return CodeTooFast, "send too fast, exceed 20 times per minute", Message{}
	}
	if rb.Secret != "" {
		get := func(k string) string {
			if v := q[k]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
		ts, err := strconv.ParseInt(get("timestamp"), 10, 64)
		if err != nil || !chattest.Within(now, time.UnixMilli(ts), TimestampSlack) {
			return CodeSecurity, "invalid timestamp", Message{}
		}
		// The query is already URL-decoded: sign is the raw Base64.
		if !hmac.Equal([]byte(get("sign")), []byte(ExpectedSign(rb.Secret, ts))) {
			return CodeSecurity, "sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]", Message{}
		}
	}
	if len(body) > BodyLimit {
		return CodeTooLong, "message too long, exceed 20000 bytes", Message{}
	}
	var p struct {
		MsgType  string `json:"msgtype"`
		Markdown *struct {
			Title string `json:"title"`
			Text  string `json:"text"`
		} `json:"markdown"`
		Text *struct {
			Content string `json:"content"`
		} `json:"text"`
		At struct {
			AtMobiles []string `json:"atMobiles"`
			IsAtAll   bool     `json:"isAtAll"`
		} `json:"at"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return 43001, "无效的JSON格式", Message{}
	}
	var m Message
	switch p.MsgType {
	case "markdown":
		if p.Markdown == nil || p.Markdown.Title == "" || p.Markdown.Text == "" {
			return CodeBadParams, "缺少参数 markdown", Message{}
		}
		m = Message{Title: p.Markdown.Title, Text: p.Markdown.Text}
	case "text":
		if p.Text == nil || p.Text.Content == "" {
			return CodeBadParams, "缺少参数 text", Message{}
		}
		m = Message{Text: p.Text.Content}
	default:
		return 40035, "缺少参数 msgtype", Message{}
	}
	m.IsAtAll, m.Mobiles = p.At.IsAtAll, p.At.AtMobiles
	if len(rb.Keywords) > 0 && !chattest.ContainsAny(m.Title+"\n"+m.Text, rb.Keywords) {
		return CodeSecurity, "keywords not in content", Message{}
	}
	return CodeOK, "ok", m
}

// ExpectedSign is DingTalk's algorithm written out: the key is the secret,
// the message the timestamp, a line feed and the secret.
func ExpectedSign(secret string, ts int64) string {
	mac := hmac.New(sha256.New, []byte(secret))
	_, _ = io.WriteString(mac, strconv.FormatInt(ts, 10)+"\n"+secret)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

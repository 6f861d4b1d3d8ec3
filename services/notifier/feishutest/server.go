// Package feishutest is a Feishu-compatible custom-bot webhook server for
// tests and demos. It behaves like Feishu where opswire depends on it:
//
//   - signature check as Feishu documents it (HMAC-SHA256 keyed with
//     "<timestamp>\n<secret>" over an empty message, Base64), timestamp within
//     one hour, otherwise code 19021;
//   - keyword check (19024) on the card's elements, not its header title
//     (the strictest reading of an undocumented rule), unknown token (19001);
//   - at most 5 requests per second (9499 "too many request") and 100 per
//     minute (11232) per bot, counted over sliding windows of arrival times;
//   - bodies over 20 KB rejected (9499 "Bad Request"), cards validated
//     against the JSON 1.0 structure;
//   - errors answered with HTTP 200 and a non-zero code, as Feishu does.
//
// It records every request, can be taken down or made to fail, and calls
// OnCard for every accepted card (the demo prints them with Card.Text).
// The signature code here is written independently of the notifier's, so a
// test that passes proves the two agree, not that one bug is shared.
package feishutest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/chattest"
)

// Limits Feishu documents for custom bots.
const (
	BodyLimit      = 20000
	PerSecond      = 5
	PerMinute      = 100
	TimestampSlack = time.Hour
	HookPrefix     = "/open-apis/bot/v2/hook/"
)

// Answers with their Feishu codes and messages.
const (
	CodeOK           = 0
	CodeBadRequest   = 9499
	CodeFrequency    = 11232
	CodeTokenInvalid = 19001
	CodeSignMismatch = 19021
	CodeKeyword      = 19024
)

// Bot is one custom bot's security settings.
type Bot struct {
	Secret   string   // empty: no signature check
	Keywords []string // empty: no keyword check
}

// Request is one recorded request.
type Request struct {
	Token  string
	Time   time.Time
	Size   int
	Body   []byte
	Code   int    // the code answered (0 = accepted), or -1 when the server was down
	Msg    string // the msg answered
	Card   *Card  // parsed card of an interactive message, if it parsed
	Signed bool
}

// Server is the fake Feishu.
type Server struct {
	*httptest.Server
	// Now is the server's clock (timestamp window); default time.Now.
	Now func() time.Time
	// OnCard is called for every accepted card, outside the server's lock.
	OnCard func(token string, c *Card)

	mu       sync.Mutex
	bots     map[string]*botState
	requests []Request
	down     bool
	failNext []failure
	latency  time.Duration
	inFlight int
}

type botState struct {
	Bot
	arrivals []time.Time
}

type failure struct {
	status int
	code   int
	msg    string
}

// NewServer starts a server on the loopback; Close it when done (t.Cleanup(s.Close)).
func NewServer() *Server {
	s := &Server{Now: time.Now, bots: map[string]*botState{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.handle))
	return s
}

// NewServerOn starts a server on l: an address that pods of a test node can
// reach, where the loopback is their own.
func NewServerOn(l net.Listener) *Server {
	s := &Server{Now: time.Now, bots: map[string]*botState{}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.handle))
	s.Server.Listener.Close()
	s.Server.Listener = l
	s.Server.Start()
	return s
}

// AddBot registers a bot and returns its webhook URL.
func (s *Server) AddBot(token string, b Bot) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bots[token] = &botState{Bot: b}
	return s.URL + HookPrefix + token
}

// SetDown makes the server drop every connection without an answer (as a
// network outage looks to the client) until SetDown(false).
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// SetLatency makes every request wait d before it is judged and answered
// (a slow receiver; tests use it to stop a notifier mid-request).
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// InFlight returns how many requests are being held by SetLatency now.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// FailNext makes the next n requests answer with the given HTTP status and
// Feishu code/msg instead of being processed.
func (s *Server) FailNext(n, status, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		s.failNext = append(s.failNext, failure{status, code, msg})
	}
}

// Requests returns a copy of every recorded request.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Cards returns the accepted cards of one bot, in arrival order.
func (s *Server) Cards(token string) []*Card {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Card
	for _, r := range s.requests {
		if r.Token == token && r.Code == CodeOK && r.Card != nil {
			out = append(out, r.Card)
		}
	}
	return out
}

// Count returns how many recorded requests have the given answer code.
func (s *Server) Count(code int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.Code == code {
			n++
		}
	}
	return n
}

// RateViolations counts requests refused for exceeding 5/s or 100/min.
func (s *Server) RateViolations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.requests {
		if r.Code == CodeFrequency || (r.Code == CodeBadRequest && r.Msg == msgTooMany) {
			n++
		}
	}
	return n
}

const (
	msgOK        = "success"
	msgTooMany   = "too many request"
	msgFrequency = "frequency limited psm[lark.oapi.app_platform_runtime]appID[1500]"
	msgBad       = "Bad Request"
	msgToken     = "param invalid: incoming webhook access token invalid"
	msgSign      = "sign match fail or timestamp is not within one hour from current time"
	msgKeyword   = "Key Words Not Found"
)

type answer struct {
	Code int            `json:"code"`
	Msg  string         `json:"msg"`
	Data map[string]any `json:"data"`
	// Feishu still sends the redundant legacy fields on success.
	StatusCode    *int    `json:"StatusCode,omitempty"`
	StatusMessage *string `json:"StatusMessage,omitempty"`
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body := chattest.ReadBody(r, 1<<20)
	s.mu.Lock()
	latency := s.latency
	s.inFlight++
	s.mu.Unlock()
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	// Judged when the latency is over, even if the client went away
	// meanwhile: a real server may still post a card whose answer was lost.
	now := s.Now()
	token := strings.TrimPrefix(r.URL.Path, HookPrefix)
	rec := Request{Token: token, Time: now, Size: len(body), Body: body}

	s.mu.Lock()
	if s.down {
		rec.Code = -1
		s.requests = append(s.requests, rec)
		s.mu.Unlock()
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if len(s.failNext) > 0 {
		f := s.failNext[0]
		s.failNext = s.failNext[1:]
		rec.Code, rec.Msg = f.code, f.msg
		s.requests = append(s.requests, rec)
		s.mu.Unlock()
		writeJSON(w, f.status, answer{Code: f.code, Msg: f.msg, Data: map[string]any{}})
		return
	}
	code, msg, card, signed := s.judge(r, token, body, now)
	rec.Code, rec.Msg, rec.Card, rec.Signed = code, msg, card, signed
	s.requests = append(s.requests, rec)
	onCard := s.OnCard
	s.mu.Unlock()

	a := answer{Code: code, Msg: msg, Data: map[string]any{}}
	if code == CodeOK {
		zero, ok := 0, msgOK
		a.StatusCode, a.StatusMessage = &zero, &ok
		if onCard != nil && card != nil {
			onCard(token, card)
		}
	}
	writeJSON(w, http.StatusOK, a)
}

// judge applies Feishu's checks in the order that makes sense for a client:
// the bot must exist, the request counts against the rate limits, then size,
// shape, signature and keyword. Must be called with s.mu held.
func (s *Server) judge(r *http.Request, token string, body []byte, now time.Time) (int, string, *Card, bool) {
	bot, ok := s.bots[token]
	if r.Method != http.MethodPost || !ok {
		return CodeTokenInvalid, msgToken, nil, false
	}
	if code, msg := bot.admit(now); code != CodeOK {
		return code, msg, nil, false
	}
	if len(body) > BodyLimit {
		return CodeBadRequest, msgBad, nil, false
	}
	var m struct {
		Timestamp json.RawMessage `json:"timestamp"`
		Sign      string          `json:"sign"`
		MsgType   string          `json:"msg_type"`
		Card      json.RawMessage `json:"card"`
		Content   json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return 99991300, "invalid request body: not json", nil, false
	}
	signed := m.Sign != ""
	if bot.Secret != "" {
		ts, err := parseTimestamp(m.Timestamp)
		if err != nil || m.Sign == "" || !chattest.Within(now, time.Unix(ts, 0), TimestampSlack) || !hmac.Equal([]byte(m.Sign), []byte(expectedSign(bot.Secret, ts))) {
			return CodeSignMismatch, msgSign, nil, signed
		}
	}
	var card *Card
	var text string
	switch m.MsgType {
	case "interactive":
		c, err := ParseCard(m.Card)
		if err != nil {
			return CodeBadRequest, msgBad + ": " + err.Error(), nil, signed
		}
		card, text = c, c.BodyText()
	case "text", "post":
		text = string(m.Content)
	default:
		return 19002, "params error, msg_type need", nil, signed
	}
	if len(bot.Keywords) > 0 && !chattest.ContainsAny(text, bot.Keywords) {
		return CodeKeyword, msgKeyword, nil, signed
	}
	return CodeOK, msgOK, card, signed
}

// admit counts a request against the bot's sliding windows.
func (b *botState) admit(now time.Time) (int, string) {
	b.arrivals = chattest.Slide(b.arrivals, now, time.Minute)
	inSecond := 0
	for _, t := range b.arrivals {
		if now.Sub(t) < time.Second {
			inSecond++
		}
	}
	switch {
	case len(b.arrivals) > PerMinute:
		return CodeFrequency, msgFrequency
	case inSecond > PerSecond:
		return CodeBadRequest, msgTooMany
	}
	return CodeOK, ""
}

// expectedSign is Feishu's algorithm, written out step by step.
func expectedSign(secret string, ts int64) string {
	stringToSign := fmt.Sprintf("%v", ts) + "\n" + secret
	h := hmac.New(sha256.New, []byte(stringToSign))
	h.Write(nil)
	return base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// ExpectedSign exposes the server's signature for cross-checks in tests.
func ExpectedSign(secret string, ts int64) string { return expectedSign(secret, ts) }

// parseTimestamp accepts the documented string form and the numeric form
// some SDKs send.
func parseTimestamp(raw json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return strconv.ParseInt(s, 10, 64)
	}
	var n int64
	err := json.Unmarshal(raw, &n)
	return n, err
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

package feishutest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url string, body any) (code int, msg string) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a.Code, a.Msg
}

func card(title string) map[string]any {
	return map[string]any{"msg_type": "interactive", "card": map[string]any{
		"header":   map[string]any{"title": map[string]any{"tag": "plain_text", "content": title}, "template": "red"},
		"elements": []any{map[string]any{"tag": "markdown", "content": "hello " + title}}}}
}

// titleOnly is a card whose only text outside the header has no keyword.
func titleOnly(title string) map[string]any {
	return map[string]any{"msg_type": "interactive", "card": map[string]any{
		"header":   map[string]any{"title": map[string]any{"tag": "plain_text", "content": title}, "template": "red"},
		"elements": []any{map[string]any{"tag": "markdown", "content": "hello"}}}}
}

func TestServerChecks(t *testing.T) {
	s := NewServer()
	defer s.Close()
	now := time.Unix(1599360473, 0)
	s.Now = func() time.Time { return now }
	signed := s.AddBot("signed", Bot{Secret: "demo", Keywords: []string{"alert"}})
	open := s.AddBot("open", Bot{})
	withSign := func(ts any, sign string, m map[string]any) map[string]any {
		m["timestamp"], m["sign"] = ts, sign
		return m
	}
	tests := []struct {
		name string
		url  string
		body any
		code int
	}{
		{"documented vector, string timestamp", signed, withSign("1599360473", "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8=", card("alert: x")), CodeOK},
		{"numeric timestamp", signed, withSign(1599360473, "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8=", card("alert: x")), CodeOK},
		{"missing sign", signed, card("alert: x"), CodeSignMismatch},
		{"timestamp over an hour old", signed, withSign("1599356000", ExpectedSign("demo", 1599356000), card("alert")), CodeSignMismatch},
		{"keyword only in the title", signed, withSign("1599360473", "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8=", titleOnly("alert: x")), CodeKeyword},
		{"keyword absent", signed, withSign("1599360473", "l1N0gAcBjdwBvGm1xMjOF0XSyaLRpR7tuO5dHfhAYc8=", card("x")), CodeKeyword},
		{"unknown token", s.URL + HookPrefix + "nope", card("x"), CodeTokenInvalid},
		{"card 2.0 rejected", open, map[string]any{"msg_type": "interactive", "card": map[string]any{"schema": "2.0"}}, CodeBadRequest},
		{"colour outside the enum", open, map[string]any{"msg_type": "interactive", "card": map[string]any{
			"header": map[string]any{"title": map[string]any{"tag": "plain_text", "content": "t"}, "template": "gray"}, "elements": []any{map[string]any{"tag": "hr"}}}}, CodeBadRequest},
		{"body over 20 KB", open, map[string]any{"msg_type": "text", "content": map[string]any{"text": strings.Repeat("x", BodyLimit)}}, CodeBadRequest},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now = now.Add(time.Second) // stay under 5/s
			if i == 0 {
				now = time.Unix(1599360473, 0)
			}
			if code, msg := post(t, tc.url, tc.body); code != tc.code {
				t.Fatalf("code %d (%s), want %d", code, msg, tc.code)
			}
		})
	}
	if got := len(s.Cards("signed")); got != 2 {
		t.Fatalf("accepted cards of signed bot = %d, want 2", got)
	}
}

func TestServerRateLimits(t *testing.T) {
	tests := []struct {
		name     string
		requests int
		spacing  time.Duration
		want     map[int]int // code -> count
	}{
		{"6 in one second: the 6th is 9499", 6, 100 * time.Millisecond, map[int]int{CodeOK: 5, CodeBadRequest: 1}},
		{"5 per second is fine", 10, 200 * time.Millisecond, map[int]int{CodeOK: 10}},
		{"101 in a minute: the 101st is 11232", 101, 300 * time.Millisecond, map[int]int{CodeOK: 100, CodeFrequency: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewServer()
			defer s.Close()
			now := time.Unix(1000, 0)
			s.Now = func() time.Time { return now }
			u := s.AddBot("b", Bot{})
			got := map[int]int{}
			for i := 0; i < tc.requests; i++ {
				code, _ := post(t, u, card("t"))
				got[code]++
				now = now.Add(tc.spacing)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("answers %v, want %v", got, tc.want)
			}
			if v := s.RateViolations(); v != tc.requests-tc.want[CodeOK] {
				t.Fatalf("RateViolations = %d", v)
			}
		})
	}
}

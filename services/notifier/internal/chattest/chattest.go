// Package chattest holds what the fake chat receivers (dingtalktest,
// wecomtest, slacktest, teamstest, feishutest) share: the sliding window of
// arrivals their rate limits count, the signature timestamp window, the
// bounded body read, and the book of recorded requests and accepted
// messages. Each fake keeps its own checks, codes and answers; nothing here
// decides what a receiver answers.
package chattest

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Slide appends now to arrivals and drops the arrivals at least period
// before now, so len of the result is the count within the window.
func Slide(arrivals []time.Time, now time.Time, period time.Duration) []time.Time {
	arrivals = append(arrivals, now)
	for len(arrivals) > 0 && now.Sub(arrivals[0]) >= period {
		arrivals = arrivals[1:]
	}
	return arrivals
}

// Within reports whether t is no more than slack away from now, either way
// (a signature timestamp from a clock ahead or behind).
func Within(now, t time.Time, slack time.Duration) bool {
	d := now.Sub(t)
	if d < 0 {
		d = -d
	}
	return d <= slack
}

// ContainsAny reports whether s contains one of words.
func ContainsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// ReadBody reads at most limit bytes of the request body.
func ReadBody(r *http.Request, limit int64) []byte {
	b, _ := io.ReadAll(io.LimitReader(r.Body, limit))
	return b
}

// Book records every request (R) a fake answered and, per hook, the
// messages (M) it accepted. It does not lock: the fake's own mutex guards it
// together with the rest of the fake's state. The zero Book is ready.
type Book[R, M any] struct {
	requests []R
	messages map[string][]M
}

// Record adds a request and, if accepted, its message under hook.
func (b *Book[R, M]) Record(req R, hook string, m M, accepted bool) {
	b.requests = append(b.requests, req)
	if accepted {
		if b.messages == nil {
			b.messages = map[string][]M{}
		}
		b.messages[hook] = append(b.messages[hook], m)
	}
}

// Requests returns a copy of the recorded requests in arrival order.
func (b *Book[R, M]) Requests() []R { return append([]R(nil), b.requests...) }

// Messages returns a copy of hook's accepted messages in arrival order.
func (b *Book[R, M]) Messages(hook string) []M { return append([]M(nil), b.messages[hook]...) }

// Count returns how many recorded requests match.
func (b *Book[R, M]) Count(match func(R) bool) int {
	n := 0
	for _, r := range b.requests {
		if match(r) {
			n++
		}
	}
	return n
}

// moreLine is the "…and N more" line in every built-in locale (en, zh-CN).
var moreLine = regexp.MustCompile(`…(?:and (\d+) more|另有 (\d+) 行)`)

// Table reads the table of a message's text: rows counts the lines that
// begin with bullet, more is the N of its first "…and N more" (or its
// zh-CN "…另有 N 行"; 0 without).
func Table(text, bullet string) (rows, more int) {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, bullet) {
			rows++
		}
	}
	if x := moreLine.FindStringSubmatch(text); x != nil {
		more, _ = strconv.Atoi(x[1] + x[2])
	}
	return rows, more
}

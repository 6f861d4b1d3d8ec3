// Package chattext holds what the chat receivers other than Feishu share:
// defusing cluster text so it can neither mention people nor become a link
// in any chat client's markdown, the "…and N more" accounting, and the
// largest-rows-that-fit search every size budget needs.
//
// render.Clean already turns "<", ">", "*", "|" and "`" into harmless forms
// and shows markdown links as "text (url)"; Defuse adds what chat services
// read on top of that: "@" mentions (DingTalk and WeCom "@all", Slack
// "@channel", Teams "@name"), bare URLs that clients auto-link, and the
// angle-bracket forms (<!channel>, <at>, <@userid>) in text that did not pass
// through Clean (route titles).
package chattext

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/locale"
	"github.com/opswire/opswire/services/notifier/internal/notify"
)

// zwsp (U+200B) splits tokens that clients would otherwise auto-link; it is
// invisible, so the text reads the same.
const zwsp = "\u200b"

var defuser = strings.NewReplacer(
	"@", "＠", // fullwidth: no service parses it as a mention
	"<", "＜", ">", "＞",
	"://", ":/"+zwsp+"/",
	"](", "] (",
	"\r", " ",
)

// Defuse makes one piece of text safe: no mention, no link, no tag.
// Line breaks are kept (summaries have several lines); table cells arrive
// one-line from render.Clean.
func Defuse(s string) string { return www.ReplaceAllString(defuser.Replace(s), "${1}"+zwsp+".") }

// www matches "www." in any case (clients auto-link "WWW.example.com" too).
var www = regexp.MustCompile(`(?i)(www)\.`)

// Content is a notification with every text defused and the table cut to
// rows rows; More is what the "…and N more" line must say.
type Content struct {
	Title    string
	Severity string // info, warning or critical: what colours and marks are chosen by
	// SeverityLabel is the severity as a title prefix shows it, in the
	// notification's locale (CRITICAL, 严重).
	SeverityLabel string
	Summary       string // markdown with **bold**
	Columns       []string
	Rows          [][]string
	More          int
	Footer        string // "opswire · cluster X · time · severity"
	// Locale is the notification's; MoreLine words the "…and N more" line in it.
	Locale *locale.Locale
}

// Build defuses n and keeps its first rows rows (as many as exist).
func Build(n *notify.Notification, rows int) Content {
	rows = max(0, min(rows, len(n.Rows)))
	l := n.Locale
	c := Content{Title: Defuse(n.Title), Severity: string(n.Severity), SeverityLabel: l.SeverityLabel(string(n.Severity)),
		Summary: Defuse(n.Summary), More: len(n.Rows) - rows + n.Omitted, Locale: l}
	for _, col := range n.Columns {
		c.Columns = append(c.Columns, Defuse(col))
	}
	for _, r := range n.Rows[:rows] {
		cells := make([]string, len(r))
		for i, v := range r {
			cells[i] = Defuse(v)
		}
		c.Rows = append(c.Rows, cells)
	}
	c.Footer = Footer(l, Defuse(n.Cluster), n.Time, string(n.Severity))
	return c
}

// Footer is the last line of every card: "opswire · cluster X · time ·
// severity", in l's language with the time in l's zone.
func Footer(l *locale.Locale, cluster string, t time.Time, severity string) string {
	return l.T("opswire · cluster %s · %s · %s", cluster, l.Time(t), l.Word(severity))
}

// MoreLine is the line that accounts for rows not shown; "" when none are.
func (c Content) MoreLine() string { return MoreLine(c.Locale, c.More) }

// MoreLine is the line that accounts for more rows not shown, in l; ""
// when none are.
func MoreLine(l *locale.Locale, more int) string {
	if more <= 0 {
		return ""
	}
	return l.T("…and %d more", more)
}

// Want is how many of total rows a message may show at most: all of them,
// or maxRows when that is set (> 0) and smaller.
func Want(total, maxRows int) int {
	if maxRows > 0 && total > maxRows {
		return maxRows
	}
	return total
}

// Fit returns the largest row count in [0, want] whose rendering size(rows)
// is within limit; ok is false when even no rows do not fit. size must grow
// with rows (more rows never make a message shorter).
func Fit(want, limit int, size func(rows int) int) (rows int, ok bool) {
	if size(want) <= limit {
		return want, true
	}
	rows = sort.Search(want+1, func(i int) bool { return size(i) > limit }) - 1
	return rows, rows >= 0
}

// TooLarge is the error of a message over its budget even without rows.
func TooLarge(what string, limit int) error {
	return &notify.SendError{Reason: notify.ReasonTooLarge, Err: fmt.Errorf("%s over %d bytes even without rows", what, limit)}
}

// CodeRule is how a service-specific answer code is judged.
type CodeRule struct {
	Reason    notify.Reason
	Retryable bool
}

// ClassifyErrcode judges the {"errcode":N,"errmsg":"…"} answers of DingTalk
// and WeCom, which report most errors with HTTP 200. The code decides
// whatever the status; judge maps a non-zero code (and its message) to a
// rule, ok=false for a code it does not know. Unknown codes are permanent
// unless the status says the server failed (5xx) or throttled (429).
// Success needs a 2xx, a JSON body and errcode 0.
func ClassifyErrcode(status int, body []byte, judge func(code int, msg string) (CodeRule, bool)) (bool, error) {
	var r struct {
		Code *int   `json:"errcode"`
		Msg  string `json:"errmsg"`
	}
	parsed := json.Unmarshal(body, &r) == nil
	if parsed && r.Code != nil && *r.Code != 0 {
		se := &notify.SendError{Status: status, Code: *r.Code, Msg: r.Msg}
		if rule, ok := judge(*r.Code, r.Msg); ok {
			se.Reason = rule.Reason
			return rule.Retryable, se
		}
		switch {
		case status == 429:
			se.Reason = notify.ReasonRateLimited
			return true, se
		case status >= 500:
			se.Reason = notify.ReasonServer
			return true, se
		}
		se.Reason = notify.ReasonBadRequest
		return false, se
	}
	if retry, err := ClassifyStatus(status); err != nil {
		return retry, err
	}
	switch {
	case !parsed:
		// A 2xx we cannot read may be a proxy page; it did not say "ok".
		return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Err: errors.New("answer is not JSON")}
	case r.Code == nil:
		return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Code: -1}
	}
	return false, nil
}

// ClassifyStatus judges a bare HTTP status: nil for 2xx; 429 and 5xx
// retryable; 3xx (never followed), 404/410 and other 4xx permanent.
func ClassifyStatus(status int) (bool, error) {
	se := &notify.SendError{Status: status}
	switch {
	case status >= 200 && status < 300:
		return false, nil
	case status == 429:
		se.Reason = notify.ReasonRateLimited
		return true, se
	case status >= 500:
		se.Reason = notify.ReasonServer
		return true, se
	case status >= 300 && status < 400:
		se.Reason = notify.ReasonRedirect
	case status == 404 || status == 410:
		se.Reason = notify.ReasonNotFound
	case status == 401 || status == 403:
		se.Reason = notify.ReasonForbidden
	case status == 413:
		se.Reason = notify.ReasonTooLarge
	default:
		se.Reason = notify.ReasonBadRequest
	}
	return false, se
}

// RetryAfter reads a Retry-After header in seconds (the form Slack and
// Teams send) or as an HTTP date; 0 when absent or unreadable.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(min(n, 3600)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), time.Hour)
	}
	return 0
}

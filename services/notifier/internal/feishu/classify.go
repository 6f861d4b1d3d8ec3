package feishu

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/opswire/opswire/services/notifier/internal/notify"
)

// Response is Feishu's answer. Code is a pointer because the legacy shape
// has no code, only StatusCode, with its text in StatusMessage.
type Response struct {
	Code          *int   `json:"code"`
	Msg           string `json:"msg"`
	StatusCode    *int   `json:"StatusCode"`
	StatusMessage string `json:"StatusMessage"`
}

// Feishu codes with a meaning of their own (feishu-webhook.md §3.2).
const (
	CodeOK            = 0
	CodeBadRequest    = 9499  // "Bad Request" (shape or size) or "too many request"
	CodeFrequency     = 11232 // frequency limited
	CodeTokenInvalid  = 19001
	CodeBotDisabled   = 19007
	CodeSignMismatch  = 19021
	CodeIPNotAllowed  = 19022
	CodeKeywordAbsent = 19024
)

// Classify judges one HTTP answer. The body's code comes first, whatever the
// HTTP status: Feishu answers most errors with HTTP 200, but throttling has
// also been seen with HTTP 400 (code 11232 or 9499 "too many request"), and
// that must be retried, not dead-lettered. Without a code the status
// decides: 429 and 5xx are retryable, other non-2xx statuses permanent.
// Success needs a 2xx status, a body that parses and code 0 (StatusCode 0
// only when code is absent).
func Classify(status int, body []byte) (retryable bool, err error) {
	var r Response
	parsed := json.Unmarshal(body, &r) == nil
	code, hasCode, msg := -1, false, ""
	if parsed {
		switch {
		case r.Code != nil:
			code, hasCode, msg = *r.Code, true, r.Msg
		case r.StatusCode != nil:
			// The legacy shape: its text is what tells 9499's throttling
			// from a bad request, and what the error log shows.
			code, hasCode, msg = *r.StatusCode, true, r.StatusMessage
		}
	}
	ok2xx := status >= 200 && status < 300
	if hasCode && code != CodeOK {
		return classifyCode(status, code, msg)
	}
	switch {
	case status == 429:
		return true, &notify.SendError{Reason: notify.ReasonRateLimited, Status: status}
	case status >= 500:
		return true, &notify.SendError{Reason: notify.ReasonServer, Status: status}
	case status >= 300 && status < 400:
		return false, &notify.SendError{Reason: notify.ReasonRedirect, Status: status}
	case !ok2xx:
		return false, &notify.SendError{Reason: notify.ReasonBadRequest, Status: status}
	case !parsed:
		// A 2xx we cannot read may be a proxy page; it did not say "ok".
		return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Err: errors.New("answer is not JSON")}
	case !hasCode:
		return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Code: -1}
	}
	return false, nil
}

// classifyCode judges a non-zero Feishu code. Codes that mean "wait" are
// retryable at any HTTP status; unknown codes are permanent unless the status
// says the server failed (5xx) or throttled (429).
func classifyCode(status, code int, msg string) (bool, error) {
	se := &notify.SendError{Status: status, Code: code, Msg: msg}
	switch code {
	case CodeFrequency:
		se.Reason = notify.ReasonRateLimited
		return true, se
	case CodeBadRequest:
		m := strings.ToLower(msg)
		if strings.Contains(m, "too many") || strings.Contains(m, "frequency") {
			se.Reason = notify.ReasonRateLimited
			return true, se
		}
		se.Reason = notify.ReasonBadRequest
	case CodeSignMismatch:
		se.Reason = notify.ReasonSignature
	case CodeIPNotAllowed:
		se.Reason = notify.ReasonIPRejected
	case CodeKeywordAbsent:
		se.Reason = notify.ReasonKeyword
	case CodeTokenInvalid, CodeBotDisabled:
		se.Reason = notify.ReasonToken
	default:
		switch {
		case status == 429:
			se.Reason = notify.ReasonRateLimited
			return true, se
		case status >= 500:
			se.Reason = notify.ReasonServer
			return true, se
		}
		se.Reason = notify.ReasonBadRequest
	}
	return false, se
}

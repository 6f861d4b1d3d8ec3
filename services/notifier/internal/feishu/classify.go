package feishu

import (
	"encoding/json"
	"strings"

	"github.com/opswire/opswire/services/notifier/internal/notify"
)

// Response is Feishu's answer. Code is a pointer because the legacy success
// shape has no code, only StatusCode.
type Response struct {
	Code       *int   `json:"code"`
	Msg        string `json:"msg"`
	StatusCode *int   `json:"StatusCode"`
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

// Classify judges one HTTP answer. Success needs a 2xx status, a body that
// parses and code 0 (StatusCode 0 only when code is absent). Transport-like
// failures and throttling are retryable; everything the sender cannot fix by
// waiting (signature, keyword, IP list, token, bad body) is permanent.
func Classify(status int, body []byte) (retryable bool, err error) {
	var r Response
	parseErr := json.Unmarshal(body, &r)
	switch {
	case status == 429:
		return true, &notify.SendError{Reason: notify.ReasonRateLimited, Status: status}
	case status >= 500:
		return true, &notify.SendError{Reason: notify.ReasonServer, Status: status}
	case status < 200 || status >= 300:
		se := &notify.SendError{Reason: notify.ReasonBadRequest, Status: status}
		if parseErr == nil && r.Code != nil {
			se.Code, se.Msg = *r.Code, r.Msg
		}
		return false, se
	case parseErr != nil:
		// A 2xx we cannot read may be a proxy page; it did not say "ok".
		return true, &notify.SendError{Reason: notify.ReasonBadResponse, Status: status, Err: parseErr}
	}
	code := -1
	switch {
	case r.Code != nil:
		code = *r.Code
	case r.StatusCode != nil:
		code = *r.StatusCode
	}
	if code == CodeOK {
		return false, nil
	}
	se := &notify.SendError{Status: status, Code: code, Msg: r.Msg}
	switch code {
	case CodeFrequency:
		se.Reason = notify.ReasonRateLimited
		return true, se
	case CodeBadRequest:
		m := strings.ToLower(r.Msg)
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
	case -1:
		se.Reason = notify.ReasonBadResponse
		return true, se
	default:
		se.Reason = notify.ReasonBadRequest
	}
	return false, se
}

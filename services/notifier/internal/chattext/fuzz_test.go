package chattext_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/opswire/opswire/services/notifier/internal/chattext"
	"github.com/opswire/opswire/services/notifier/internal/dingtalk"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/slack"
	"github.com/opswire/opswire/services/notifier/internal/teams"
	"github.com/opswire/opswire/services/notifier/internal/wecom"
)

// FuzzChatAnswersAndDefuse: every answer any chat receiver (or a proxy in
// front of it) can give is judged without a panic, a delivery only on a 2xx,
// every failure a SendError with a reason; and no text survives Defuse with
// a mention, tag or link in it.
func FuzzChatAnswersAndDefuse(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"errcode":0,"errmsg":"ok"}`}, {200, `{"errcode":130101,"errmsg":"send too fast"}`},
		{200, `{"errcode":310000,"errmsg":"sign not match"}`}, {200, `{"errcode":45009}`}, {200, "ok"},
		{429, "rate_limited"}, {404, "no_service"}, {202, ""}, {200, "1"},
		{200, "Microsoft Teams endpoint returned HTTP error 429 with ContextId x"}, {401, `{"error":{"code":"DirectApiAuthorizationRequired"}}`},
		{302, ""}, {502, "<html>"}, {200, `{"errcode":null}`}, {200, `[]`},
	} {
		f.Add(s.status, []byte(s.body))
	}
	classifiers := map[string]func(int, []byte) (bool, error){
		"dingtalk": dingtalk.Classify, "wecom": wecom.Classify, "slack": slack.Classify, "teams": teams.Classify,
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		for name, classify := range classifiers {
			retryable, err := classify(status, body)
			if err == nil {
				if status < 200 || status >= 300 || retryable {
					t.Fatalf("%s: HTTP %d %q counted as delivered (retryable=%v)", name, status, body, retryable)
				}
				continue
			}
			var se *notify.SendError
			if !errors.As(err, &se) || se.Reason == "" {
				t.Fatalf("%s: Classify(%d, %q) error %v has no reason", name, status, body, err)
			}
		}
		out := strings.ToLower(chattext.Defuse(string(body)))
		for _, bad := range []string{"@", "<", ">", "://", "www.", "]("} {
			if strings.Contains(out, bad) {
				t.Fatalf("Defuse(%q) = %q contains %q", body, out, bad)
			}
		}
	})
}

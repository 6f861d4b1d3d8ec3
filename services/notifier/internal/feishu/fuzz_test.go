package feishu

import (
	"errors"
	"testing"

	"github.com/opswire/opswire/services/notifier/internal/notify"
)

// FuzzClassify: every answer a receiver (or a proxy in front of it) can give
// must be judged without a panic; only a 2xx carrying code 0 is a delivery,
// and every failure is a SendError with a reason (the metric label).
func FuzzClassify(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, `{"code":0,"msg":"success","data":{}}`}, {200, `{"StatusCode":0,"StatusMessage":"success"}`},
		{400, `{"code":11232,"msg":"frequency limited"}`}, {400, `{"code":9499,"msg":"too many request"}`},
		{200, `{"code":19021,"msg":"sign match fail or timestamp is not within one hour from current time"}`},
		{302, ``}, {502, `<html>bad gateway</html>`}, {200, `{"code":null}`}, {200, `[]`}, {429, `{}`},
	} {
		f.Add(s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		retryable, err := Classify(status, body)
		if err == nil {
			if status < 200 || status >= 300 {
				t.Fatalf("HTTP %d %q counted as delivered", status, body)
			}
			if retryable {
				t.Fatalf("a delivery is marked retryable")
			}
			return
		}
		var se *notify.SendError
		if !errors.As(err, &se) || se.Reason == "" {
			t.Fatalf("Classify(%d, %q) error %v has no reason", status, body, err)
		}
	})
}

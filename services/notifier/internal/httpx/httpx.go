// Package httpx is the one HTTP step every webhook sink shares: POST a JSON
// body and read a bounded answer, with errors that never contain the URL.
// A webhook URL carries the bot's token, so net/http's habit of quoting the
// URL in every *url.Error would leak it into logs.
package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/opswire/opswire/services/notifier/internal/notify"
)

// maxAnswer bounds how much of an answer is read; receivers answer in bytes.
const maxAnswer = 64 << 10

// PostJSON sends body to rawURL and returns the status and the answer.
// Transport failures come back as *notify.SendError with ReasonTransport.
func PostJSON(ctx context.Context, client *http.Client, rawURL string, body []byte) (int, []byte, error) {
	status, _, b, err := PostJSONHeader(ctx, client, rawURL, body)
	return status, b, err
}

// PostJSONHeader is PostJSON that also returns the answer's headers (for
// Retry-After).
func PostJSONHeader(ctx context.Context, client *http.Client, rawURL string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, &notify.SendError{Reason: notify.ReasonBadRequest, Err: errors.New("cannot build the request (bad URL)")}
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, &notify.SendError{Reason: notify.ReasonTransport, Err: RedactURL(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return 0, nil, nil, &notify.SendError{Reason: notify.ReasonTransport, Err: RedactURL(err)}
	}
	return resp.StatusCode, resp.Header, b, nil
}

// CheckURL accepts an absolute http(s) webhook URL. Its error never repeats
// the URL, which carries the bot's token.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return errors.New("webhook URL is not an absolute http(s) URL")
	}
	return nil
}

// Answer is a receiver's answer to one POST.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// PostValue is one send attempt of a message: it marshals v and POSTs it
// with PostJSONHeader. retry says whether a failure may be retried: a
// message that cannot be marshalled never can (ReasonBadRequest), a
// transport failure can. The answer itself is left to the receiver's
// classification.
func PostValue(ctx context.Context, client *http.Client, rawURL string, v any) (a Answer, retry bool, err error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Answer{}, false, &notify.SendError{Reason: notify.ReasonBadRequest, Err: err}
	}
	a.Status, a.Header, a.Body, err = PostJSONHeader(ctx, client, rawURL, body)
	if err != nil {
		return Answer{}, true, err
	}
	return a, false, nil
}

// NoRedirects returns a copy of client (nil: a new one) that never follows
// redirects: net/http would turn a POST answered with 301/302/303 into a
// GET to the new location, whose 2xx would then count as delivered. The 3xx
// itself comes back to the sink, which treats it as a permanent failure.
func NoRedirects(client *http.Client) *http.Client {
	c := &http.Client{}
	if client != nil {
		*c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// RedactURL strips the request URL from an HTTP client error.
func RedactURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", strings.ToLower(ue.Op), ue.Err)
	}
	return err
}

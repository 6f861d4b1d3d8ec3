package feishu

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/opswire/opswire/services/notifier/internal/httpx"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
)

// DefaultBodyLimit is Feishu's request body limit ("请求体的数据大小不能超过
// 20 KB"); whether that means 20,000 or 20,480 bytes is undocumented, so the
// smaller is the default.
const DefaultBodyLimit = 20000

// Sink sends cards to one Feishu webhook.
type Sink struct {
	url       config.Secret
	secret    config.Secret
	keyword   string
	client    *http.Client
	bodyLimit int
	maxRows   int
	now       func() time.Time
}

var _ notify.Sink = (*Sink)(nil)

// Options configure a Sink. Client and Now default to http.DefaultClient's
// transport and time.Now.
type Options struct {
	URL       config.Secret
	Secret    config.Secret
	Keyword   string
	BodyLimit int
	// MaxRows caps the table rows of a card (0 = as many as fit).
	MaxRows int
	Client  *http.Client
	Now     func() time.Time
}

// New builds a Feishu sink. The URL must be absolute http(s); the error never
// repeats it.
func New(o Options) (*Sink, error) {
	if err := httpx.CheckURL(o.URL.Value()); err != nil {
		return nil, err
	}
	s := &Sink{url: o.URL, secret: o.Secret, keyword: o.Keyword, client: httpx.NoRedirects(o.Client), bodyLimit: o.BodyLimit, maxRows: o.MaxRows, now: o.Now}
	if s.bodyLimit <= 0 {
		s.bodyLimit = DefaultBodyLimit
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Fit returns the card with as many rows as fit the body limit, and how
// many rows it shows. The signature fields are budgeted at their real size.
func (s *Sink) Fit(n *notify.Notification) (*Card, int, error) {
	size := func(rows int) (*Card, int) {
		c := BuildCard(n, s.keyword, rows)
		m := Message{MsgType: "interactive", Card: c}
		if s.secret.IsSet() {
			m.Timestamp, m.Sign = "0000000000", strings.Repeat("x", 44)
		}
		b, _ := json.Marshal(m)
		return c, len(b)
	}
	want := len(n.Rows)
	if s.maxRows > 0 && want > s.maxRows {
		want = s.maxRows
	}
	if c, sz := size(want); sz <= s.bodyLimit {
		return c, want, nil
	}
	// The largest row count that fits; rows only ever add bytes.
	rows := sort.Search(want+1, func(i int) bool {
		_, sz := size(i)
		return sz > s.bodyLimit
	}) - 1
	if rows < 0 {
		return nil, 0, &notify.SendError{Reason: notify.ReasonTooLarge, Err: fmt.Errorf("card over %d bytes even without rows", s.bodyLimit)}
	}
	c, _ := size(rows)
	return c, rows, nil
}

// Send makes one attempt. It signs with the current time, so every retry is
// signed afresh and an old timestamp can never cause 19021.
func (s *Sink) Send(ctx context.Context, n *notify.Notification) (bool, error) {
	card, _, err := s.Fit(n)
	if err != nil {
		return false, err
	}
	m := Message{MsgType: "interactive", Card: card}
	if s.secret.IsSet() {
		ts := s.now().Unix()
		m.Timestamp, m.Sign = fmt.Sprint(ts), Sign(s.secret.Value(), ts)
	}
	a, retry, err := httpx.PostValue(ctx, s.client, s.url.Value(), m)
	if err != nil {
		return retry, err
	}
	return Classify(a.Status, a.Body)
}

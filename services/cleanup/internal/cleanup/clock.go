package cleanup

import (
	"net/http"
	"sync"
	"time"
)

// ServerClock tells the API server's time, so that a deadline computed from a
// timestamp the API server wrote (deletionTimestamp) does not fire early when
// the local clock runs ahead of the server's.
//
// Every API response carries a Date header, the server's time truncated to
// the second. The server's time when the response arrived is at least that
// Date, so Date plus the monotonic time elapsed since the response is a lower
// bound of the server's time now: deadlines may fire up to a second (plus the
// request's latency) late, never early. Elapsed time is measured with the
// monotonic clock, so a step of the local wall clock (NTP) changes nothing.
// The highest bound seen is kept (the closest to the truth): a sample above it
// replaces it; a sample below it by no more than a Date header's truncation
// plus slack (stepBack) is consistent with it and changes nothing, so the
// clock does not jump back and forth by fractions of a second (the audit
// times stay ordered); a sample further below means the server's clock was
// stepped back, and the clock follows it.
//
// Until the first response, Now is the local clock; the actuator's re-check
// runs right after a GET, so no write is decided on the local clock.
type ServerClock struct {
	local func() time.Time // with a monotonic reading

	mu     sync.Mutex
	date   time.Time // server time at least at ...
	at     time.Time // ... this local instant (monotonic)
	synced bool
	// Skew, when set, receives the local clock minus the server's, in seconds.
	Skew func(seconds float64)
}

// stepBack is how far below the kept bound a new sample may be and still be
// consistent with it: the Date header's truncation (1 s) plus latency slack.
const stepBack = 1500 * time.Millisecond

// NewServerClock returns a clock that follows the Date headers it is shown
// (Observe, or a transport wrapped with Wrap).
func NewServerClock() *ServerClock { return &ServerClock{local: time.Now} }

// Now is a lower bound of the API server's current time.
func (c *ServerClock) Now() time.Time {
	now := c.local()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		return now
	}
	return c.date.Add(now.Sub(c.at))
}

// Synced reports whether a Date header has been seen.
func (c *ServerClock) Synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced
}

// Observe takes a response's Date header, received at the local instant recv.
func (c *ServerClock) Observe(date string, recv time.Time) {
	d, err := http.ParseTime(date)
	if err != nil {
		return
	}
	c.mu.Lock()
	if !c.synced || !d.Before(c.date.Add(recv.Sub(c.at))) || c.date.Add(recv.Sub(c.at)).Sub(d) > stepBack {
		c.date, c.at, c.synced = d, recv, true
	}
	skew := recv.Round(0).Sub(c.date.Add(recv.Sub(c.at)))
	c.mu.Unlock()
	if c.Skew != nil {
		c.Skew(skew.Seconds())
	}
}

// Wrap returns a transport that shows every response's Date header to the
// clock (for rest.Config.Wrap).
func (c *ServerClock) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			if d := resp.Header.Get("Date"); d != "" {
				c.Observe(d, c.local())
			}
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

package cleanup

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestServerClock: the clock follows the server's Date headers, as a lower
// bound, whatever the local clock says; the best recent sample wins.
func TestServerClock(t *testing.T) {
	server := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	local := time.Now() // monotonic; runs 10 min ahead of server below
	c := &ServerClock{local: func() time.Time { return local }}
	if !c.Now().Equal(local) || c.Synced() {
		t.Fatal("before any sample the clock is the local one")
	}
	var skew float64
	c.Skew = func(s float64) { skew = s }
	c.Observe(server.Format(http.TimeFormat), local)
	if !c.Synced() || !c.Now().Equal(server) {
		t.Fatalf("Now = %v, want %v", c.Now(), server)
	}
	if want := local.Round(0).Sub(server).Seconds(); skew != want {
		t.Fatalf("skew = %v s, want %v", skew, want)
	}
	local = local.Add(1500 * time.Millisecond)
	if want := server.Add(1500 * time.Millisecond); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v (elapsed monotonic time added)", c.Now(), want)
	}
	// A later sample with a lower bound (Date truncated to the second) does not pull the clock back.
	c.Observe(server.Add(time.Second).Format(http.TimeFormat), local)
	if want := server.Add(1500 * time.Millisecond); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v (the better sample kept)", c.Now(), want)
	}
	// A higher bound replaces it.
	c.Observe(server.Add(2*time.Second).Format(http.TimeFormat), local)
	if want := server.Add(2 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v", c.Now(), want)
	}
	// Much later, a sample a little below the extrapolated bound is
	// consistent with it (Date truncation): no step back.
	local = local.Add(time.Hour)
	c.Observe(server.Add(time.Hour+time.Second).Format(http.TimeFormat), local)
	if want := server.Add(time.Hour + 2*time.Second); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v (no step back within the truncation)", c.Now(), want)
	}
	// A sample far below: the server's clock was stepped back; follow it.
	c.Observe(server.Add(time.Hour-time.Minute).Format(http.TimeFormat), local)
	if want := server.Add(time.Hour - time.Minute); !c.Now().Equal(want) {
		t.Fatalf("Now = %v, want %v", c.Now(), want)
	}
	c.Observe("garbage", local)
	if want := server.Add(time.Hour - time.Minute); !c.Now().Equal(want) {
		t.Fatalf("a bad Date header changed the clock: %v", c.Now())
	}
}

// TestServerClockWrap: responses through the wrapped transport feed the clock.
func TestServerClockWrap(t *testing.T) {
	serverTime := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", serverTime.Format(http.TimeFormat))
	}))
	defer srv.Close()
	c := NewServerClock()
	resp, err := (&http.Client{Transport: c.Wrap(http.DefaultTransport)}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	now := c.Now()
	if now.Before(serverTime) || now.After(serverTime.Add(5*time.Second)) {
		t.Fatalf("Now = %v, want about %v (an hour behind the local clock)", now, serverTime)
	}
}

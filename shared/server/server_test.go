package server

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	s := New()
	ready := errors.New("caches not synced")
	s.AddReadiness("informers", func() error { return ready })
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "opswire_test_total", Help: "test"})
	s.Registry.MustRegister(c)
	c.Inc()
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	get := func(path string) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "informers: caches not synced") {
		t.Errorf("/readyz = %d %q, want 503 naming the check", code, body)
	}
	ready = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz after ready = %d", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "opswire_test_total 1") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics missing series")
	}
}

// TestPprofOptIn: Go profiles are served only when asked for.
func TestPprofOptIn(t *testing.T) {
	for _, on := range []bool{false, true} {
		s := New()
		s.Pprof = on
		ts := httptest.NewServer(s.Handler())
		resp, err := http.Get(ts.URL + "/debug/pprof/heap?gc=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ts.Close()
		if want := map[bool]int{false: 404, true: 200}[on]; resp.StatusCode != want {
			t.Errorf("Pprof %v: /debug/pprof/heap = %d, want %d", on, resp.StatusCode, want)
		}
	}
}

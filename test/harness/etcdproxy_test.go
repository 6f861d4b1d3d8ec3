package harness

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEtcdProxyHoldsWatchStreamsOnly runs the proxy against a stand-in for
// etcd's gRPC port (h2c; every call echoes each line the client sends, then
// ends with a grpc-status trailer): while held, a Watch stream's answers stay
// back, in order, while another call's go through; on release they come, and
// the stream's trailer after them.
func TestEtcdProxyHoldsWatchStreamsOnly(t *testing.T) {
	etcd := startEchoH2C(t)
	p := startEtcdProxy(t, etcd)
	watch := openEchoStream(t, p.URL+watchMethod)
	other := openEchoStream(t, p.URL+"/etcdserverpb.KV/Range")

	watch.send("a")
	watch.expect(t, "a")
	p.hold(true)
	watch.send("b")
	watch.send("c")
	other.send("x")
	other.expect(t, "x") // other calls pass while watches are held
	watch.expectNothing(t, 200*time.Millisecond)
	watch.in.Close() // etcd ends the stream: its end waits too
	watch.expectNothing(t, 100*time.Millisecond)

	p.hold(false)
	watch.expect(t, "b")
	watch.expect(t, "c")
	watch.expectEnd(t)
	if got := watch.resp.Trailer.Get("Grpc-Status"); got != "0" {
		t.Fatalf("trailer grpc-status = %q after release, want 0", got)
	}
}

// TestEtcdProxyPassesTrailersOnlyAnswers: an error etcd answers with the
// status in the headers that end the stream (gRPC's Trailers-Only, e.g. a
// read of a compacted revision) reaches the client so, not as headers and
// then an end without trailers (an Internal error in the client).
func TestEtcdProxyPassesTrailersOnlyAnswers(t *testing.T) {
	p := startEtcdProxy(t, startEchoH2C(t))
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2c}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, p.URL+failMethod, strings.NewReader("x\n"))
	req.Header.Set("Content-Type", "application/grpc")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("Grpc-Status"); got != "11" {
		t.Fatalf("grpc-status in headers = %q, want 11", got)
	}
	if resp.ContentLength != 0 {
		t.Fatalf("headers did not end the stream (content length %d, want 0)", resp.ContentLength)
	}
}

const failMethod = "/etcdserverpb.KV/Fail"

// startEchoH2C serves h2c: every request's body lines echoed, then a
// trailer; failMethod answers Trailers-Only.
func startEchoH2C(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &h2c, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		if r.URL.Path == failMethod { // gRPC's Trailers-Only: the status in headers that end the stream
			w.Header().Set("Grpc-Status", "11")
			// 204, not gRPC's 200: so Go adds no Content-Length, and the
			// client's ContentLength (0, else -1) tells whether the
			// headers ended the stream.
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Trailer", "Grpc-Status")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			_, _ = w.Write([]byte(sc.Text() + "\n"))
			_ = rc.Flush()
		}
		w.Header().Set("Grpc-Status", "0")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

type echoStream struct {
	in    *io.PipeWriter
	resp  *http.Response
	lines chan string // closed at the body's end
}

func openEchoStream(t *testing.T, url string) *echoStream {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.Header.Set("Content-Type", "application/grpc")
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2c}
	t.Cleanup(tr.CloseIdleConnections)
	s := &echoStream{in: pw, lines: make(chan string, 16)}
	go func() { _, _ = pw.Write([]byte("hello\n")) }() // the server answers headers on the first line
	var err error
	if s.resp, err = tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pw.Close(); s.resp.Body.Close() })
	go func() {
		sc := bufio.NewScanner(s.resp.Body)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	s.expect(t, "hello")
	return s
}

func (s *echoStream) send(line string) { _, _ = s.in.Write([]byte(line + "\n")) }

func (s *echoStream) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case got, ok := <-s.lines:
		if !ok || got != want {
			t.Fatalf("stream gave %q (open %v), want %q", got, ok, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("stream gave nothing in 5 s, want %q", want)
	}
}

func (s *echoStream) expectNothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got, ok := <-s.lines:
		t.Fatalf("held stream gave %q (open %v)", got, ok)
	case <-time.After(d):
	}
}

func (s *echoStream) expectEnd(t *testing.T) {
	t.Helper()
	select {
	case got, ok := <-s.lines:
		if ok {
			t.Fatalf("stream gave %q, want its end", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end in 5 s")
	}
}

package harness

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// etcdProxy sits between one kube-apiserver and etcd and can hold back what
// etcd sends on its Watch streams, so that this API server's watch cache lags
// the store while its other etcd calls (the reads it sends to etcd itself,
// writes, leases) go through.
//
// kube-apiserver talks gRPC to etcd: HTTP/2 without TLS (h2c) on an http://
// URL. The proxy forwards each HTTP/2 stream as it is (headers, the body as
// it comes, the trailers carrying grpc-status), so it needs no gRPC library
// and no etcd types: a gRPC call is one HTTP/2 stream named by its path.
// Everything etcd says about watches travels on /etcdserverpb.Watch/Watch
// streams: events, the "created" answers, progress notifications (which
// the API server's watch cache waits for before it serves a consistent
// LIST). Holding those streams' answers holds all of it. The etcd client
// multiplexes many watches on one stream; the proxy holds whole streams.
type etcdProxy struct {
	URL string

	target    string          // etcd's client URL
	transport *http.Transport // h2c: gRPC
	http1     *http.Transport // etcd's HTTP/1 endpoints (/health, the JSON gateway)
	srv       *http.Server

	mu   sync.Mutex
	cond *sync.Cond // signals: data read from etcd, hold released, a stream's context ended
	held bool
}

// watchMethod is the gRPC method whose answers HoldWatch holds back.
const watchMethod = "/etcdserverpb.Watch/Watch"

// startEtcdProxy starts a proxy to etcd at target (an http:// client URL);
// it closes on cleanup.
func startEtcdProxy(t testing.TB, target string) *etcdProxy {
	t.Helper()
	// The proxy keeps its listener, so a port the kernel picks is never
	// released between the pick and the bind.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	p := &etcdProxy{
		URL:    "http://" + l.Addr().String(),
		target: strings.TrimSuffix(target, "/"),
		// Only h2c: gRPC is HTTP/2, and etcd's client port speaks it without TLS.
		// No gzip of its own: the bytes go through as etcd sends them.
		transport: &http.Transport{Protocols: &h2c, DisableCompression: true},
		http1:     &http.Transport{DisableCompression: true},
	}
	p.cond = sync.NewCond(&p.mu)
	var serve http.Protocols
	serve.SetHTTP1(true) // etcd's /health and JSON gateway: cp.etcdCall works through the proxy
	serve.SetUnencryptedHTTP2(true)
	p.srv = &http.Server{
		Handler:   http.HandlerFunc(p.forward),
		Protocols: &serve,
		// The API server opens a stream per watch group, lease keep-alive
		// and call in flight: etcd itself allows 2^32.
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: 1 << 16},
	}
	go func() { _ = p.srv.Serve(l) }()
	t.Cleanup(p.close)
	return p
}

// hold starts or ends holding back the Watch streams' answers. Ending it
// sends each stream's held answers on, in order.
func (p *etcdProxy) hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = on
	p.cond.Broadcast()
}

func (p *etcdProxy) close() {
	p.hold(false)
	_ = p.srv.Close() // ends every stream: their contexts end
	p.transport.CloseIdleConnections()
	p.http1.CloseIdleConnections()
}

// forward passes one HTTP/2 stream (one gRPC call) on to etcd and its
// answer back.
func (p *etcdProxy) forward(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	out, err := http.NewRequestWithContext(ctx, r.Method, p.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.ContentLength = r.ContentLength
	if r.Body == nil || r.Body == http.NoBody {
		out.Body = nil
	}
	tr := p.transport
	if r.ProtoMajor == 1 {
		tr = p.http1
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		// etcd is unreachable: end the stream the way a broken connection
		// would, so the client's gRPC layer retries as it would then.
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	for k, vv := range resp.Header {
		w.Header()[k] = vv
	}
	w.WriteHeader(resp.StatusCode)
	if resp.Header.Get("Grpc-Status") != "" {
		// gRPC's Trailers-Only answer (an error, say a compacted revision):
		// the status is in the headers, which must end the stream. Sent on
		// their own, then an empty end, they would leave the client
		// without trailers (an Internal error instead of etcd's).
		return
	}
	_ = http.NewResponseController(w).Flush()
	if r.URL.Path == watchMethod {
		err = p.relayHeld(ctx, w, resp.Body)
	} else {
		err = relay(w, resp.Body)
	}
	if err != nil {
		panic(http.ErrAbortHandler) // a stream etcd (or the client) broke off is broken off on the other side too
	}
	for k, vv := range resp.Trailer { // grpc-status, grpc-message
		w.Header()[http.TrailerPrefix+k] = vv
	}
}

// relay copies a stream's answers as they come.
func relay(w http.ResponseWriter, body io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// relayHeld is relay for a Watch stream: while the proxy holds, what etcd
// sends is read on (etcd never sees a slow reader) and kept, and the end of
// the stream waits too; on release it goes out in order.
func (p *etcdProxy) relayHeld(ctx context.Context, w http.ResponseWriter, body io.Reader) error {
	var (
		pending []byte
		readErr error // io.EOF at the stream's end; set once
	)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := body.Read(buf)
			p.mu.Lock()
			pending = append(pending, buf[:n]...)
			if err != nil {
				readErr = err
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	rc := http.NewResponseController(w)
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case !p.held && len(pending) > 0:
			chunk := pending
			pending = nil
			p.mu.Unlock()
			_, err := w.Write(chunk)
			if err == nil {
				err = rc.Flush()
			}
			p.mu.Lock()
			if err != nil {
				return err
			}
		case !p.held && readErr != nil:
			if errors.Is(readErr, io.EOF) {
				return nil
			}
			return readErr
		default:
			p.cond.Wait()
		}
	}
}

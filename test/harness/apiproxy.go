package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// APIProxy is a reverse proxy in front of the kube-apiserver, for fault
// tests: it counts the requests that pass (by method and path, at the source,
// so a repeated write is seen even when the API answers it with a conflict)
// and it can cut its clients off (in-flight requests, watches included, end;
// new ones get 503) as if their API server were down, while the real one
// stays up for the test. Clients keep their own credentials (RBAC applies).
type APIProxy struct {
	URL string

	mu         sync.Mutex
	cut        bool
	cancel     context.CancelFunc
	ctx        context.Context
	requests   []APIRequest
	onAnswer   func(APIRequest)
	refuse     func(APIRequest) bool // requests answered refuseCode, never forwarded
	refuseCode int
}

// APIRequest is one request the proxy saw.
type APIRequest struct {
	Method string
	Path   string
	Query  url.Values
	Status int       // the API's answer (0 while in flight or when cut)
	Sent   time.Time // when the request reached the proxy
	At     time.Time // when the API's answer arrived at the proxy
	// Expired: the answer said the requested resourceVersion is too old
	// (410 Gone, as an HTTP status or as a watch's ERROR event).
	Expired bool
}

// IsList reports whether the request asks for a full state: a LIST, or a
// WATCH with sendInitialEvents (client-go's streaming list).
func (r APIRequest) IsList() bool {
	if r.Method != http.MethodGet {
		return false
	}
	if r.Query.Get("watch") == "true" || r.Query.Get("watch") == "1" {
		return r.Query.Get("sendInitialEvents") == "true"
	}
	// A GET of one object has a name after the resource: /api/v1/pods is a
	// list, /api/v1/namespaces/x/pods a list, /api/v1/namespaces/x/pods/y not.
	parts := strings.Split(strings.Trim(r.Path, "/"), "/")
	switch {
	case len(parts) == 3: // api/v1/pods
		return true
	case len(parts) == 5 && parts[2] == "namespaces": // api/v1/namespaces/x/pods
		return true
	}
	return false
}

// requestIndex carries a request's index in APIProxy.requests to ModifyResponse.
type requestIndex struct{}

// StartAPIProxy starts a proxy to cp (closed on cleanup). A write (anything
// but a GET) whose client dies mid-request is still forwarded to its end and
// counted: the API server carries it out anyway. Only Cut ends it early.
func StartAPIProxy(t testing.TB, cp *ControlPlane) *APIProxy {
	t.Helper()
	target, err := url.Parse(cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := &APIProxy{}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // watches stream
	rp.ErrorLog = log.New(io.Discard, "", 0)
	rp.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		http.Error(w, "proxy: "+err.Error(), http.StatusBadGateway)
	}
	rp.ModifyResponse = func(resp *http.Response) error {
		idx, ok := resp.Request.Context().Value(requestIndex{}).(int)
		if !ok {
			return nil
		}
		p.mu.Lock()
		p.requests[idx].Status, p.requests[idx].At = resp.StatusCode, time.Now()
		r, hook := p.requests[idx], p.onAnswer
		p.mu.Unlock()
		if hook != nil {
			hook(r)
		}
		return nil
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		cut, ctx, idx := p.cut, p.ctx, len(p.requests)
		req := APIRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Sent: time.Now()}
		refused := !cut && p.refuse != nil && p.refuse(req)
		if refused {
			req.Status, req.At = p.refuseCode, time.Now()
		}
		if !cut {
			p.requests = append(p.requests, req)
		}
		code := p.refuseCode
		p.mu.Unlock()
		if cut {
			http.Error(w, "proxy: cut off", http.StatusServiceUnavailable)
			return
		}
		if refused {
			http.Error(w, "proxy: refused by the test", code)
			return
		}
		// A cut ends the requests in flight, watches included, the way an API
		// server ends a watch: the stream closes cleanly, and the client
		// watches again from its last resourceVersion. (A context without the
		// server's value keeps the reverse proxy from aborting the stream.)
		rctx, stop := context.WithCancel(context.WithValue(context.Background(), requestIndex{}, idx))
		defer stop()
		clientGone := r.Context().Done()
		if r.Method != http.MethodGet {
			clientGone = nil // a write is carried out whether its client waits or not
		}
		go func() {
			select {
			case <-ctx.Done():
			case <-clientGone:
			case <-rctx.Done():
			}
			stop()
		}()
		rec := &statusRecorder{ResponseWriter: w}
		rp.ServeHTTP(rec, r.WithContext(rctx))
		p.mu.Lock()
		if p.requests[idx].At.IsZero() {
			p.requests[idx].At = time.Now()
		}
		p.requests[idx].Status, p.requests[idx].Expired = rec.code, rec.expired || rec.code == http.StatusGone
		p.mu.Unlock()
	}))
	p.URL = srv.URL
	t.Cleanup(func() {
		p.mu.Lock()
		p.cancel()
		p.mu.Unlock()
		srv.CloseClientConnections()
		srv.Close()
	})
	return p
}

// OnAnswer sets a hook that runs for every answer of the API server, after
// it arrived and before it goes back to the client (so a test can, say, kill
// the client that is about to learn its write succeeded).
func (p *APIProxy) OnAnswer(hook func(APIRequest)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onAnswer = hook
}

// Refuse answers every request that match accepts with code, without
// forwarding it: a write that never reached the API server whose answer the
// client cannot tell from a lost one (a 504 from a proxy). nil ends it.
func (p *APIProxy) Refuse(match func(APIRequest) bool, code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse, p.refuseCode = match, code
}

// Cut ends every request in flight and refuses new ones until Restore.
func (p *APIProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.cancel()
}

// Restore lets requests through again.
func (p *APIProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.ctx, p.cancel = context.WithCancel(context.Background())
}

// Requests returns the requests seen so far that match.
func (p *APIProxy) Requests(match func(APIRequest) bool) []APIRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []APIRequest
	for _, r := range p.requests {
		if match == nil || match(r) {
			out = append(out, r)
		}
	}
	return out
}

// Count is len(Requests(match)).
func (p *APIProxy) Count(match func(APIRequest) bool) int { return len(p.Requests(match)) }

// Kubeconfig copies a kubeconfig file, pointing its clusters at the proxy.
func (p *APIProxy) Kubeconfig(t testing.TB, src string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = p.URL
		c.InsecureSkipTLSVerify = true
		c.CertificateAuthorityData, c.CertificateAuthority = nil, ""
	}
	dst := filepath.Join(t.TempDir(), "proxy-"+filepath.Base(src))
	if err := clientcmd.WriteToFile(*cfg, dst); err != nil {
		t.Fatal(err)
	}
	return dst
}

// statusRecorder keeps the status code of a proxied answer; Unwrap lets the
// reverse proxy flush streamed watches.
type statusRecorder struct {
	http.ResponseWriter
	code    int
	expired bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	// The Status of a watch's ERROR event carries this message in JSON and
	// in protobuf alike (strings are stored as they are).
	if !s.expired && bytes.Contains(b, tooOld) {
		s.expired = true
	}
	return s.ResponseWriter.Write(b)
}

var tooOld = []byte("too old resource version")

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

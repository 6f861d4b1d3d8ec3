//go:build bench

package bench

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/opswire/opswire/test/harness"
)

// request is one API request as the counting proxy classifies it.
type request struct {
	Agent    string // User-Agent up to the first '/', e.g. opswire-cordon
	Verb     string // GET LIST WATCH CREATE UPDATE PATCH DELETE DELETECOLLECTION
	Resource string // e.g. pods, nodes, events, leases, pods/status
}

// apiCounter is a reverse proxy in front of the kube-apiserver that counts
// every request by user agent, verb and resource. Services reach the API
// through it with a kubeconfig of their own, so what it counts is exactly
// what the processes sent (the API server's own metrics carry no user agent).
type apiCounter struct {
	URL string

	mu     sync.Mutex
	counts map[request]int
	cached map[request]int           // the GETs and LISTs among counts served from the watch cache
	spent  map[request]time.Duration // time to the end of the response, WATCH excluded
	// accepted counts the requests the API server answered with a 2xx (a
	// patch refused by its precondition is a 409: counted, not accepted).
	accepted map[request]int
	// answered counts the requests the API server has answered (any status):
	// counts less answered are the requests in flight.
	answered map[request]int
	// continued counts the LISTs that carry a continue token (a later page):
	// the LISTs less these are the first pages, one per list read.
	continued map[request]int
}

func startAPICounter(b testing.TB, cp *harness.ControlPlane) *apiCounter {
	b.Helper()
	target, err := url.Parse(cp.URL)
	if err != nil {
		b.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // watches stream
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}
	c := &apiCounter{counts: map[request]int{}, cached: map[request]int{}, spent: map[request]time.Duration{},
		accepted: map[request]int{}, answered: map[request]int{}, continued: map[request]int{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := classify(r)
		c.count(req, cacheRead(req, r), req.Verb == "LIST" && r.URL.Query().Get("continue") != "")
		// client-go does not send a bearer token to a plain-HTTP server, so
		// the proxy authenticates every request as the admin.
		r.Header.Set("Authorization", "Bearer "+cp.Token)
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		proxy.ServeHTTP(sw, r)
		c.spend(req, time.Since(start))
		c.answer(req, sw.status())
	})}
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(func() { _ = srv.Close() })
	c.URL = "http://" + l.Addr().String()
	return c
}

// Kubeconfig writes a kubeconfig that goes through the proxy (which adds the admin token).
func (c *apiCounter) Kubeconfig(b testing.TB, cp *harness.ControlPlane) string {
	b.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: c.URL}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cp.Token}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "admin"}
	cfg.CurrentContext = "bench"
	path := filepath.Join(b.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		b.Fatal(err)
	}
	return path
}

func (c *apiCounter) count(r request, cached, continued bool) {
	c.mu.Lock()
	c.counts[r]++
	if cached {
		c.cached[r]++
	}
	if continued {
		c.continued[r]++
	}
	c.mu.Unlock()
}

// answered notes the status code the API server gave a request.
func (c *apiCounter) answer(r request, code int) {
	c.mu.Lock()
	c.answered[r]++
	if code >= 200 && code <= 299 {
		c.accepted[r]++
	}
	c.mu.Unlock()
}

// statusWriter records the status code of a response; Unwrap lets the
// reverse proxy flush a watch stream through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// snapshotOf copies one of the counter's maps so far.
func (c *apiCounter) snapshotOf(m map[request]int) map[request]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[request]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// snapshotAccepted copies the 2xx counts so far.
func (c *apiCounter) snapshotAccepted() map[request]int { return c.snapshotOf(c.accepted) }

// snapshotAnswered copies the answered counts so far.
func (c *apiCounter) snapshotAnswered() map[request]int { return c.snapshotOf(c.answered) }

// snapshotContinued copies the later-page LIST counts so far.
func (c *apiCounter) snapshotContinued() map[request]int { return c.snapshotOf(c.continued) }

// cacheRead reports whether a GET or LIST is served from the API server's
// watch cache: it names a resourceVersion ("0": any; otherwise at least that
// version, resourceVersionMatch=NotOlderThan or unset). A read without one
// is a consistent read from etcd; so is a later page of a list (continue),
// counted as such here although newer API servers may serve it from a cache
// snapshot.
func cacheRead(req request, r *http.Request) bool {
	if req.Verb != "GET" && req.Verb != "LIST" {
		return false
	}
	q := r.URL.Query()
	if q.Get("continue") != "" || q.Get("resourceVersion") == "" {
		return false
	}
	m := q.Get("resourceVersionMatch")
	return m == "" || m == "NotOlderThan"
}

// snapshotCached copies the cache-read counts so far.
func (c *apiCounter) snapshotCached() map[request]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[request]int, len(c.cached))
	for k, v := range c.cached {
		out[k] = v
	}
	return out
}

func (c *apiCounter) spend(r request, d time.Duration) {
	if r.Verb == "WATCH" {
		return
	}
	c.mu.Lock()
	c.spent[r] += d
	c.mu.Unlock()
}

// meanLatency is the mean time the API server took for one kind of request.
func (c *apiCounter) meanLatency(r request) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts[r] == 0 {
		return 0
	}
	return c.spent[r] / time.Duration(c.counts[r])
}

// snapshot copies the counts so far.
func (c *apiCounter) snapshot() map[request]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[request]int, len(c.counts))
	for k, v := range c.counts {
		out[k] = v
	}
	return out
}

// delta is after minus before.
func delta(after, before map[request]int) map[request]int {
	out := map[request]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// sum adds the counts that match.
func sum(counts map[request]int, match func(request) bool) int {
	n := 0
	for k, v := range counts {
		if match(k) {
			n += v
		}
	}
	return n
}

// describe lists the counts of one agent, most frequent first.
func describe(counts map[request]int, agent string) string { return describeCached(counts, nil, agent) }

// describeCached is describe, and says for the reads how many were served
// from the watch cache (cached nil: not said).
func describeCached(counts, cached map[request]int, agent string) string {
	type row struct {
		k request
		n int
	}
	var rows []row
	for k, v := range counts {
		if k.Agent == agent {
			rows = append(rows, row{k, v})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].n != rows[j].n {
			return rows[i].n > rows[j].n
		}
		return rows[i].k.Verb+rows[i].k.Resource < rows[j].k.Verb+rows[j].k.Resource
	})
	var parts []string
	for _, r := range rows {
		part := fmt.Sprintf("%s %s=%d", r.k.Verb, r.k.Resource, r.n)
		if cached != nil && (r.k.Verb == "GET" || r.k.Verb == "LIST") {
			part += fmt.Sprintf(" (%d from the watch cache)", cached[r.k])
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// classify maps an API request to (agent, verb, resource) the way the API
// server's request metrics do.
func classify(r *http.Request) request {
	agent, _, _ := strings.Cut(r.UserAgent(), "/")
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return request{Agent: agent, Verb: r.Method, Resource: "nonresource"}
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:] // a namespaced resource
	}
	if len(rest) == 0 {
		return request{Agent: agent, Verb: r.Method, Resource: "discovery"}
	}
	resource, named := rest[0], len(rest) >= 2
	if len(rest) >= 3 {
		resource += "/" + rest[2]
	}
	verb := r.Method
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "WATCH"
		case named:
			verb = "GET"
		default:
			verb = "LIST"
		}
	case http.MethodPost:
		verb = "CREATE"
	case http.MethodPut:
		verb = "UPDATE"
	case http.MethodDelete:
		if !named {
			verb = "DELETECOLLECTION"
		}
	}
	return request{Agent: agent, Verb: verb, Resource: resource}
}

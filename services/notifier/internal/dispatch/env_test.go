package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/feishu"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/route"
	"github.com/opswire/opswire/services/notifier/internal/service"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// cluster is the cluster name in subjects and delivered-id keys.
const cluster = "prod-eu"

// env is one notifier engine on an embedded nats-server: the real OPS
// stream, the durable consumer the service creates, the DLQ stream and the
// delivered-id bucket.
type env struct {
	t        *testing.T
	nc       *nats.Conn
	js       jetstream.JetStream
	kv       jetstream.KeyValue
	records  jetstream.JetStream // the delivered records' batched reads and asynchronous writes
	store    dispatch.Delivered  // if set, the engine's records instead of delivered()
	rateLog  dispatch.RateLog    // if set, where the engine saves its rate logs
	defaults []string            // the engine's defaultReceivers
	cons     jetstream.Consumer
	settings dispatch.Settings
	pause    dispatch.Pauser // handed to the engines start builds (nil: never paused)

	mu       sync.Mutex
	outcomes []dispatch.Outcome
}

// notifierConfig is the service's defaults with test-sized timings.
func notifierConfig() config.Notifier {
	n := config.Default().Notifier
	n.AckWait = config.D(5 * time.Second)
	n.MaxDeliver = 20
	return n
}

func newEnv(t *testing.T, n config.Notifier) *env {
	t.Helper()
	nc, js := natstest.Connect(t)
	ctx := context.Background()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.EnsureDeadLetterStream(ctx, js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, subject.OpsStream, service.ConsumerConfig(cluster, "test", n))
	if err != nil {
		t.Fatal(err)
	}
	records, err := dispatch.NewAsyncRecorder(nc, 64, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, nc: nc, js: js, kv: kv, records: records, cons: cons, settings: dispatch.Settings{Cluster: cluster,
		RetryInitial: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond, GiveUpAfter: time.Minute,
		AckWait: n.AckWait.Duration, MaxDeliver: n.MaxDeliver,
		// Pipelined lookups in batched reads, as the service runs them (the
		// unit tests that call Handle directly keep the synchronous path).
		Lookups: 8, LookupBatch: 4}}
	sub, err := nc.Subscribe("notify.>", func(m *nats.Msg) {
		var o dispatch.Outcome
		if err := json.Unmarshal(m.Data, &o); err != nil {
			t.Errorf("outcome on %s is not JSON: %v", m.Subject, err)
			return
		}
		if want := subject.Notify(cluster, o.Receiver, o.Outcome); m.Subject != want {
			t.Errorf("outcome on %s, want %s", m.Subject, want)
		}
		e.mu.Lock()
		e.outcomes = append(e.outcomes, o)
		e.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

// delivered is the delivered-record store as the service builds it: batched
// reads (3 keys per request, so a burst takes several) and asynchronous writes.
func (e *env) delivered() *dispatch.KVDelivered {
	return &dispatch.KVDelivered{KV: e.kv, Async: e.records, Parallel: 4, StatesBatch: 3}
}

// engine is a running dispatcher fed by the durable consumer.
type engine struct {
	d       *dispatch.Dispatcher
	metrics *dispatch.Metrics
	stop    func()
}

// handler lets a test stand between the consumer and the dispatcher.
type handler func(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg)

func plain(d *dispatch.Dispatcher, ctx context.Context, m jetstream.Msg) { d.Handle(ctx, m) }

// start runs a dispatcher with the given routes and receivers, consuming
// like service.Run does. stop (also run on cleanup) ends consumption and
// the dispatcher, which naks what it still holds.
func (e *env) start(routes []config.Route, receivers []dispatch.Receiver, h handler) *engine {
	e.t.Helper()
	m := dispatch.NewMetrics(prometheus.NewRegistry())
	if e.store == nil {
		e.store = e.delivered()
	}
	d := dispatch.New(e.settings, dispatch.Deps{
		Routes:    route.New(routes, e.defaults, config.D(20*time.Millisecond), config.D(50*time.Millisecond)),
		Receivers: receivers, Delivered: e.store, DeadJS: e.js, Core: e.nc,
		Metrics: m, Log: zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel), RateLog: e.rateLog,
		Pause: e.pause,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	if h == nil {
		h = plain
	}
	cc, err := e.cons.Consume(func(msg jetstream.Msg) { h(d, ctx, msg) })
	if err != nil {
		e.t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cc.Stop()
			<-cc.Closed()
			cancel()
			<-done
		})
	}
	e.t.Cleanup(stop)
	return &engine{d: d, metrics: m, stop: stop}
}

// fastRoute groups briefly so tests wait milliseconds, not seconds.
func fastRoute(name string, receivers ...string) config.Route {
	return config.Route{Name: name, Receivers: receivers, GroupWait: config.D(20 * time.Millisecond), GroupInterval: config.D(50 * time.Millisecond)}
}

func limiter() *ratelimit.Limiter {
	return ratelimit.New(0, ratelimit.Window{Limit: 1000, Period: time.Second})
}

func webhookReceiver(t *testing.T, name, url string) dispatch.Receiver {
	t.Helper()
	s, err := webhook.New(config.Secret(url), nil)
	if err != nil {
		t.Fatal(err)
	}
	return dispatch.Receiver{Name: name, Sink: s, Limiter: limiter(), Timeout: 5 * time.Second}
}

func feishuReceiver(t *testing.T, name, url, secret, keyword string) dispatch.Receiver {
	t.Helper()
	s, err := feishu.New(feishu.Options{URL: config.Secret(url), Secret: config.Secret(secret), Keyword: keyword})
	if err != nil {
		t.Fatal(err)
	}
	return dispatch.Receiver{Name: name, Sink: s, Limiter: limiter(), Timeout: 5 * time.Second}
}

// hook is a generic-webhook receiver recording the event ids it got. While
// gated it either holds requests open or answers 503, until opened.
type hook struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	ids      map[string]int
	gate     chan struct{}
	fail     bool // while gated: answer 503 instead of holding the request
	arrived  chan struct{}
}

func newHook(t *testing.T) *hook {
	h := &hook{ids: map[string]int{}, arrived: make(chan struct{}, 100)}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	t.Cleanup(h.open)
	return h
}

// gated makes the hook hold (or, with fail, refuse) requests until open.
func (h *hook) gated(fail bool) *hook {
	h.gate, h.fail = make(chan struct{}), fail
	return h
}

func (h *hook) open() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil {
		select {
		case <-h.gate:
		default:
			close(h.gate)
		}
	}
}

func (h *hook) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.requests++
	gate, fail := h.gate, h.fail
	h.mu.Unlock()
	select {
	case h.arrived <- struct{}{}:
	default:
	}
	if gate != nil {
		if fail {
			select {
			case <-gate:
			default:
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		} else {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
	}
	var p webhook.Payload
	if err := json.Unmarshal(body, &p); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	for _, ev := range p.Events {
		h.ids[ev.ID]++
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// got returns how many requests arrived and how often each id was accepted.
func (h *hook) got() (int, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ids := make(map[string]int, len(h.ids))
	for k, v := range h.ids {
		ids[k] = v
	}
	return h.requests, ids
}

// published is one OPS event as stored.
type published struct {
	id, subject string
	seq         uint64
	msg         *nats.Msg
}

// publishCleanup stores a cleanup decision on OPS.
func (e *env) publishCleanup(i int, sev events.Severity) published {
	e.t.Helper()
	pod := fmt.Sprintf("pod-%d", i)
	id := fmt.Sprintf("cleanup/uid-%d/deleted", i)
	ev, err := envelope.New(id, envelope.Source(cluster, "cleanup"), events.TypeCleanup, "ns/"+pod,
		events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: pod, PodReason: "Evicted", Reason: "evicted 1h ago", Severity: sev, Time: time.Now()}, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	subj := subject.Ops(cluster, "cleanup", "deleted", "ns", pod)
	msg := ev.Msg(subj)
	ack, err := e.js.PublishMsg(context.Background(), msg)
	if err != nil {
		e.t.Fatal(err)
	}
	return published{id: id, subject: subj, seq: ack.Sequence, msg: msg}
}

// publishRaw stores an arbitrary message on an OPS subject.
func (e *env) publishRaw(m *nats.Msg) uint64 {
	e.t.Helper()
	ack, err := e.js.PublishMsg(context.Background(), m)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

func (e *env) info() *jetstream.ConsumerInfo {
	e.t.Helper()
	ci, err := e.cons.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return ci
}

// waitSettled waits until the consumer has acknowledged (or terminated)
// every stored OPS message and holds none.
func (e *env) waitSettled(what string) *jetstream.ConsumerInfo {
	e.t.Helper()
	var ci *jetstream.ConsumerInfo
	testkit.Eventually(e.t, 10*time.Second, what, func() bool {
		ci = e.info()
		si, err := e.js.Stream(context.Background(), subject.OpsStream)
		if err != nil {
			e.t.Fatal(err)
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == si.CachedInfo().State.LastSeq
	})
	return ci
}

func (e *env) outcomesOf(receiver, outcome string) []dispatch.Outcome {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []dispatch.Outcome
	for _, o := range e.outcomes {
		if o.Receiver == receiver && o.Outcome == outcome {
			out = append(out, o)
		}
	}
	return out
}

// eventIDs counts the event ids of a receiver's outcomes.
func (e *env) eventIDs(receiver, outcome string) map[string]int {
	ids := map[string]int{}
	for _, o := range e.outcomesOf(receiver, outcome) {
		for _, id := range o.IDs {
			ids[id]++
		}
	}
	return ids
}

func value(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

// deadLetters reads every message of the DLQ stream.
func (e *env) deadLetters() []jetstream.Msg {
	e.t.Helper()
	ctx := context.Background()
	oc, err := e.js.OrderedConsumer(ctx, dispatch.DeadLetterStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := e.js.Stream(ctx, dispatch.DeadLetterStream)
	if err != nil {
		e.t.Fatal(err)
	}
	n := int(s.CachedInfo().State.Msgs)
	var out []jetstream.Msg
	for len(out) < n {
		m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			e.t.Fatalf("reading dead letter %d of %d: %v", len(out)+1, n, err)
		}
		out = append(out, m)
	}
	return out
}

// seen reports whether the delivered-id record of a triple exists.
func (e *env) seen(routeName, receiver, id string) bool {
	e.t.Helper()
	ok, err := (&dispatch.KVDelivered{KV: e.kv}).Seen(context.Background(), dispatch.DeliveredKey(cluster, routeName, receiver, id))
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

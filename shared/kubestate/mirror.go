// Package kubestate gives an actor the cluster state the watcher mirrors into
// the KUBE stream, without a single LIST or WATCH on the API server (DESIGN §5).
//
// A Mirror reads KUBE with an ordered consumer that delivers the last message
// of every subject and then live changes: a new leader holds the whole state
// in about a second and never needs a durable consumer. Decisions are made on
// the state, not on the edge that delivered it, so a lost or repeated message
// cannot cause a wrong action.
package kubestate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// Handlers are told of every change, serially, from the consuming goroutine.
// They must be quick (enqueue work, never call the API) and must not modify
// the states they are given. cur is nil when the object was deleted.
type Handlers struct {
	OnPod  func(old, cur *events.PodState)
	OnNode func(old, cur *events.NodeState)
	// OnSynced runs once, when the initial state has been received.
	OnSynced func()
}

// Mirror holds the current pods and nodes of one cluster.
type Mirror struct {
	js      jetstream.JetStream
	cluster string
	kinds   []subject.Kind
	held    kindSet
	log     zerolog.Logger
	h       Handlers

	mu sync.RWMutex
	// pods are keyed by their KUBE subject, copied into the pod's own
	// allocation by the decoder (events.DecodePodKeyed).
	pods  map[string]*events.PodState
	nodes map[string]*events.NodeState

	synced   atomic.Bool
	syncedCh chan struct{}
	// cons is the current consumer and applied the stream sequence of the
	// last message applied: together they let CatchUp wait for KUBE.
	cons      atomic.Pointer[jetstream.Consumer]
	applied   atomic.Uint64
	malformed prometheus.Counter
	received  prometheus.Counter
	// pending is the stream's NumPending at the last message applied (the
	// mirror's lag in messages) and lag the age of that message when applied.
	pending prometheus.Gauge
	lag     prometheus.Gauge
	// syncedGauge is 1 once the initial load is done.
	syncedGauge prometheus.Gauge
}

// New builds a mirror of the given kinds (both when none are given). reg may be nil.
func New(js jetstream.JetStream, cluster string, log zerolog.Logger, reg prometheus.Registerer, h Handlers, kinds ...subject.Kind) *Mirror {
	if len(kinds) == 0 {
		kinds = []subject.Kind{subject.KindNode, subject.KindPod}
	}
	m := &Mirror{
		js: js, cluster: cluster, kinds: kinds, log: log, h: h,
		held: kindSet{pods: slices.Contains(kinds, subject.KindPod), nodes: slices.Contains(kinds, subject.KindNode)},
		pods: map[string]*events.PodState{}, nodes: map[string]*events.NodeState{},
		syncedCh: make(chan struct{}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_kube_messages_malformed_total",
			Help: "KUBE messages that could not be decoded and were skipped.",
		}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_kube_messages_received_total",
			Help: "KUBE messages received by the state mirror.",
		}),
	}
	m.pending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opswire_kube_mirror_pending_messages",
		Help: "KUBE messages not yet applied by the state mirror (its lag, in messages).",
	})
	m.lag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opswire_kube_mirror_lag_seconds",
		Help: "Age of the last KUBE message when the state mirror applied it (stream time to apply time).",
	})
	m.syncedGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opswire_kube_mirror_synced",
		Help: "1 once the state mirror holds the whole KUBE state (initial load done), 0 before.",
	})
	if reg != nil {
		// A leader builds a new mirror for each term in the same process:
		// the later ones take over the first one's collectors.
		m.malformed = register(reg, m.malformed)
		m.received = register(reg, m.received)
		m.pending = register(reg, m.pending)
		m.lag = register(reg, m.lag)
		m.syncedGauge = register(reg, m.syncedGauge)
	}
	m.syncedGauge.Set(0)
	return m
}

// register registers c, or returns the collector of the same description
// already registered.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) T {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(T); ok {
			return existing
		}
	}
	panic(err)
}

// OrderedResetAttempts is how often nats.go's ordered consumer may try to
// create its next consumer (after a reconnect, a gap or a lost consumer)
// before the mirror is told. nats.go retries with the same consumer name for
// ever by default, and a name the server cannot serve stays unservable: after
// a NATS node is SIGKILLed, the meta leader may place that R1 consumer on the
// dead node (not yet known offline), and every retry then waits for that node
// to come back. One attempt, then Run builds a consumer of a new name, which
// the server places on a live node.
const OrderedResetAttempts = 1

// consumerCreateTimeout bounds the mirror's own consumer create (nats.go's
// default is 5 s; a create answers in milliseconds when it can).
const consumerCreateTimeout = 3 * time.Second

// Run consumes until ctx ends. It recreates the consumer if the server loses
// it, or nats.go cannot replace it, resuming after the last message applied.
func (m *Mirror) Run(ctx context.Context) error {
	filters := kubeFilters(m.cluster, m.kinds)
	for {
		err := m.consume(ctx, filters)
		if ctx.Err() != nil {
			return nil
		}
		m.log.Warn().Err(err).Msg("KUBE consumer stopped; recreating")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// kubeFilters are the consumer's filter subjects: one kind's subjects, or,
// for a mirror of every kind, the cluster's whole part of KUBE as one filter
// rather than one filter per kind. The server delivers the last message of
// every subject on one filter for less than on two: ~100 ms less nats-server
// CPU per load of 150,000 pods and 5,000 nodes, the rebuild's time over the
// floor's 1.27 → 1.17 (figure 3, three interleaved pairs, 2026-12-07). A
// message of a kind the mirror does not hold is then skipped (decode).
func kubeFilters(cluster string, kinds []subject.Kind) []string {
	if slices.Contains(kinds, subject.KindNode) && slices.Contains(kinds, subject.KindPod) {
		return []string{subject.Kube(cluster)}
	}
	filters := make([]string, len(kinds))
	for i, k := range kinds {
		filters[i] = subject.KubeKind(cluster, k)
	}
	return filters
}

func (m *Mirror) consume(ctx context.Context, filters []string) error {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:   filters,
		DeliverPolicy:    jetstream.DeliverLastPerSubjectPolicy,
		MaxResetAttempts: OrderedResetAttempts,
	}
	if seq := m.applied.Load(); seq > 0 {
		// A replacement resumes where the last one stopped, as nats.go's
		// own reset does: every message after the last applied one, in
		// order (KUBE keeps one message per subject, so that is exactly
		// what a load would still send), without handing every object to
		// the handlers again. A tombstone that expired while no consumer
		// ran is lost either way (docs/reliability.md).
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	// The create has a deadline of its own: right after a NATS node died a
	// new consumer may still be placed on it, and its create then never
	// answers; Run tries again a second later under a new name.
	cctx, cancel := context.WithTimeout(ctx, consumerCreateTimeout)
	cons, err := m.js.OrderedConsumer(cctx, subject.KubeStream, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("ordered consumer on KUBE: %w", err)
	}
	// The state the server answered the creation with: the actors may not
	// ask a KUBE consumer's state (CONSUMER.INFO, docs/security.md).
	info := cons.CachedInfo()
	if info == nil {
		return errors.New("ordered consumer on KUBE: no consumer info")
	}
	if info.NumPending == 0 {
		m.markSynced()
	}
	m.presize(info.NumPending)
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return fmt.Errorf("consume KUBE: %w", err)
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		it.Stop()
	}()

	// Two stages: this goroutine decodes and applies, in stream order (so
	// handlers see every object's states in order), while another takes
	// the next messages from the consumer. The decoders made for the
	// compact states (events.DecodePod) are cheap enough that one goroutine
	// keeps up with the consumer; the worker pool encoding/json once needed
	// cost more in hand-offs than it spread, on the 2 cores an actor
	// usually gets.
	msgs := make(chan jetstream.Msg, 4096)
	readErr := make(chan error, 1)
	go func() {
		defer close(msgs)
		for {
			msg, err := it.Next()
			if err != nil {
				readErr <- err
				return
			}
			msgs <- msg
		}
	}()
	in := &events.Interner{}
	for msg := range msgs {
		d := decode(msg, in, m.held)
		m.received.Inc()
		m.apply(msg, d)
		if d.seq != 0 {
			m.pending.Set(float64(d.pending))
			// Only live changes: the initial load delivers old last states.
			if !d.stamp.IsZero() && m.synced.Load() {
				m.lag.Set(time.Since(d.stamp).Seconds())
			}
			m.applied.Store(d.seq)
			if d.pending == 0 {
				m.markSynced()
			}
		}
	}
	if err := <-readErr; !errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() == nil {
		return err
	}
	return nil
}

// decoded is what a message says, worked out without touching the maps.
type decoded struct {
	ref     subject.Ref
	err     error
	skip    bool // a kind the mirror does not hold: nothing to apply
	gone    bool // tombstone or server delete marker
	pod     *events.PodState
	key     string // the pod's map key: its subject, sharing its allocation
	node    *events.NodeState
	seq     uint64 // stream sequence; 0 if unknown
	pending uint64
	stamp   time.Time // when the stream stored the message
}

// kindSet is the kinds a mirror holds.
type kindSet struct{ pods, nodes bool }

func (k kindSet) has(kind subject.Kind) bool {
	return kind == subject.KindPod && k.pods || kind == subject.KindNode && k.nodes
}

// decode reads one message; in shares repeated strings across messages.
// A message of a kind the mirror does not hold is skipped: a mirror of every
// kind filters on the whole of the cluster's KUBE (kubeFilters), where a
// newer watcher may store kinds this build does not know, and a consumer's
// filter is not the mirror's only guard (docs/security.md: another actor
// that learnt its name could re-create it with other filters).
func decode(msg jetstream.Msg, in *events.Interner, held kindSet) decoded {
	var d decoded
	if seq, pending, ns, ok := ackMeta(msg); ok {
		d.seq, d.pending, d.stamp = seq, pending, time.Unix(0, ns)
	} else if md, err := msg.Metadata(); err == nil {
		d.seq, d.pending, d.stamp = md.Sequence.Stream, md.NumPending, md.Timestamp
	}
	d.ref, d.err = subject.ParseKube(msg.Subject())
	if d.err != nil {
		if errors.Is(d.err, subject.ErrUnknownKind) {
			d.err, d.skip = nil, true // a kind this build does not know
		}
		return d
	}
	if !held.has(d.ref.Kind) {
		d.skip = true
		return d
	}
	if len(msg.Data()) == 0 {
		d.gone = true // a server delete marker (TTL expiry of a tombstone)
		return d
	}
	switch d.ref.Kind {
	case subject.KindPod:
		var p *events.PodState
		key := msg.Subject()
		unmarshal := func(b []byte) (err error) { p, key, err = events.DecodePodKeyed(b, key, in); return err }
		if _, d.err = envelope.DecodeFunc(msg.Headers(), msg.Data(), events.TypePod, unmarshal); d.err == nil {
			d.pod, d.gone, d.key = p, p.Op == events.OpDelete, key
		}
	case subject.KindNode:
		var n *events.NodeState
		unmarshal := func(b []byte) (err error) { n, err = events.DecodeNode(b, in); return err }
		if _, d.err = envelope.DecodeFunc(msg.Headers(), msg.Data(), events.TypeNode, unmarshal); d.err == nil {
			d.node, d.gone = n, n.Op == events.OpDelete
		}
	}
	return d
}

// presize gives an empty mirror's map room for the initial load (one entry
// per pending message at most), instead of growing it step by step.
func (m *Mirror) presize(pending uint64) {
	n := int(min(pending, 1<<21))
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case len(m.pods) == 0 && slices.Contains(m.kinds, subject.KindPod):
		m.pods = make(map[string]*events.PodState, n)
	case len(m.nodes) == 0 && slices.Contains(m.kinds, subject.KindNode):
		m.nodes = make(map[string]*events.NodeState, n)
	}
}

func (m *Mirror) markSynced() {
	if m.synced.CompareAndSwap(false, true) {
		m.syncedGauge.Set(1)
		m.mu.RLock()
		m.log.Info().Int("pods", len(m.pods)).Int("nodes", len(m.nodes)).Msg("cluster state loaded from KUBE")
		m.mu.RUnlock()
		close(m.syncedCh)
		if m.h.OnSynced != nil {
			m.h.OnSynced()
		}
	}
}

// apply updates the maps with one decoded message and tells the handlers.
func (m *Mirror) apply(msg jetstream.Msg, d decoded) {
	switch {
	case d.err != nil:
		m.bad(msg, d.err)
	case d.skip:
	case d.gone:
		m.remove(msg.Subject(), d.ref)
	case d.pod != nil:
		m.mu.Lock()
		var old *events.PodState
		if m.h.OnPod != nil { // a lookup in a map of 150,000 is a cache miss: only when asked for
			old = m.pods[d.key]
		}
		// Assigning to a string key stores the new key too (the runtime
		// updates string keys in place), so a replaced pod's block, which
		// holds the old key, is freed with it.
		m.pods[d.key] = d.pod
		m.mu.Unlock()
		if m.h.OnPod != nil {
			m.h.OnPod(old, d.pod)
		}
	case d.node != nil:
		name := d.node.Name
		if name != d.ref.Name {
			name = strings.Clone(d.ref.Name)
		}
		m.mu.Lock()
		old := m.nodes[name]
		m.nodes[name] = d.node
		m.mu.Unlock()
		if m.h.OnNode != nil {
			m.h.OnNode(old, d.node)
		}
	}
}

func (m *Mirror) remove(subj string, ref subject.Ref) {
	switch ref.Kind {
	case subject.KindPod:
		m.mu.Lock()
		old, ok := m.pods[subj]
		delete(m.pods, subj)
		m.mu.Unlock()
		if ok && m.h.OnPod != nil {
			m.h.OnPod(old, nil)
		}
	case subject.KindNode:
		m.mu.Lock()
		old, ok := m.nodes[ref.Name]
		delete(m.nodes, ref.Name)
		m.mu.Unlock()
		if ok && m.h.OnNode != nil {
			m.h.OnNode(old, nil)
		}
	}
}

func (m *Mirror) bad(msg jetstream.Msg, err error) {
	m.malformed.Inc()
	m.log.Warn().Err(err).Str("subject", msg.Subject()).Msg("skipping malformed KUBE message")
}

// Synced reports whether the initial state has been received.
func (m *Mirror) Synced() bool { return m.synced.Load() }

// WaitSynced blocks until the initial state is loaded or ctx ends.
func (m *Mirror) WaitSynced(ctx context.Context) error {
	select {
	case <-m.syncedCh:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CatchUp waits until the mirror has applied every message that KUBE held for
// its subjects when CatchUp was called, so a decision taken right after it
// (an on-demand report, say) reflects everything the watcher had stored. The
// target is the stream sequence of the newest stored message matching the
// mirror's filters, read directly from the stream.
func (m *Mirror) CatchUp(ctx context.Context) error {
	if err := m.WaitSynced(ctx); err != nil {
		return err
	}
	st, err := m.js.Stream(ctx, subject.KubeStream)
	if err != nil {
		return fmt.Errorf("KUBE stream: %w", err)
	}
	var target uint64
	for _, k := range m.kinds {
		msg, err := st.GetLastMsgForSubject(ctx, subject.KubeKind(m.cluster, k))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("newest KUBE message: %w", err)
		}
		target = max(target, msg.Sequence)
	}
	for m.applied.Load() < target {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// Pod returns the state of one pod. The result is shared: do not modify it.
func (m *Mirror) Pod(namespace, name string) (*events.PodState, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	p, ok := m.pods[subject.Pod(m.cluster, namespace, name)]
	return p, ok
}

// Node returns the state of one node. The result is shared: do not modify it.
func (m *Mirror) Node(name string) (*events.NodeState, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n, ok := m.nodes[name]
	return n, ok
}

// Pods returns a snapshot slice of all pods (the states are shared, read-only).
func (m *Mirror) Pods() []*events.PodState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*events.PodState, 0, len(m.pods))
	for _, p := range m.pods {
		out = append(out, p)
	}
	return out
}

// Nodes returns a snapshot slice of all nodes (the states are shared, read-only).
func (m *Mirror) Nodes() []*events.NodeState {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]*events.NodeState, 0, len(m.nodes))
	for _, n := range m.nodes {
		out = append(out, n)
	}
	return out
}

// Len returns the number of pods and nodes held.
func (m *Mirror) Len() (pods, nodes int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.pods), len(m.nodes)
}

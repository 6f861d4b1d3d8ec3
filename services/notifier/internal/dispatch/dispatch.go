// Package dispatch is the notifier's engine: it takes OPS messages from the
// durable consumer, routes them, groups bursts per route and kind
// (Alertmanager's group wait / group interval), hands each flushed group to
// the workers of the route's receivers, and acknowledges a message only when
// every receiver it was routed to has settled it: delivered, or judged
// undeliverable and dead-lettered.
//
// Until then the message stays un-acked and is kept alive with progress acks.
// If the process dies, the acks stop and JetStream redelivers the message
// after AckWait to another replica (or to this one after a restart); the
// delivered-id records then skip the receivers that already had it, so a
// crash between sending and acking neither loses nor repeats a card.
package dispatch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/internal/locale"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/render"
	"github.com/opswire/opswire/services/notifier/internal/route"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/shared/subject"
)

// Msg is the part of jetstream.Msg the dispatcher uses.
type Msg interface {
	Subject() string
	Headers() nats.Header
	Data() []byte
	Metadata() (*jetstream.MsgMetadata, error)
	Ack() error
	Nak() error
	NakWithDelay(delay time.Duration) error
	Term() error
	InProgress() error
}

// Receiver is one configured destination with its sink and rate limit.
type Receiver struct {
	Name    string
	Sink    notify.Sink
	Limiter *ratelimit.Limiter
	// Budget names the limiter (receivers with the same URL share one) in
	// the rate log.
	Budget  string
	Timeout time.Duration
	// Locale is the language and time zone of the receiver's cards; nil is
	// English in UTC.
	Locale *locale.Locale
}

// RateLog keeps the sends of each rate budget where the next active
// replica finds them, so a failover does not start with a fresh budget.
type RateLog interface {
	Save(ctx context.Context, budget string, sends []ratelimit.Sent) error
}

// Settings are the engine's knobs (see config.Notifier).
type Settings struct {
	Cluster string
	// Fleet: the consumer reads many clusters' OPS messages (a hub's fleet
	// stream). Each message then belongs to the cluster of its subject:
	// groups, cards, delivered ids, dead letters and outcomes are per that
	// cluster, never mixed. Off: everything is Cluster's, as before fleets.
	Fleet bool
	// Consumer labels the messages metric: the service runs one consumer
	// (and one dispatcher) per receiver.
	Consumer     string
	RetryInitial time.Duration
	RetryMax     time.Duration
	GiveUpAfter  time.Duration
	AckWait      time.Duration
	MaxDeliver   int
	// Lookups bounds the messages whose delivered records are being looked
	// up or wait for a lookup: Handle returns once a message is queued for
	// its lookup (it blocks while Lookups are), and the messages join their
	// groups in the order they arrived as the answers come back. 0 or 1:
	// Handle looks up synchronously, one message at a time.
	Lookups int
	// LookupBatch is the most messages whose records one read (States)
	// takes; Lookups/LookupBatch reads are in flight at most. A read starts
	// as soon as one is free, with whatever is queued, so a lone message is
	// looked up at once and a burst in batches. 0 or 1: one read per message.
	LookupBatch int
}

// Deps are the engine's collaborators.
type Deps struct {
	Routes    *route.Table
	Receivers []Receiver
	Delivered Delivered
	DeadJS    Publisher     // JetStream, for dead letters
	Core      CorePublisher // core NATS, for outcomes
	Metrics   *Metrics
	Log       zerolog.Logger
	Now       func() time.Time
	// RateLog is optional.
	RateLog RateLog
	// Pause tells whether a pause record holds the notifier (a
	// *pause.Watcher); nil: never paused.
	Pause Pauser
}

// Pauser tells whether the notifier is paused now, and by which record.
type Pauser interface {
	Paused() (pause.Record, bool)
}

// Dispatcher routes, groups and tracks messages until they are settled.
type Dispatcher struct {
	s       Settings
	d       Deps
	workers map[string]*worker
	now     func() time.Time
	baseCtx context.Context
	wg      sync.WaitGroup
	mu      sync.Mutex
	groups  map[string]*group
	pending map[*pending]struct{} // admitted: in their groups or retry loops
	// held maps the stream sequence of every message this dispatcher holds,
	// from Handle (waiting for its lookup included) until it is acked,
	// nak'ed or released, to its pending. After a NATS outage longer than
	// AckWait the server redelivers held messages to this same live
	// dispatcher; found here, a redelivery only becomes the delivery the
	// later ack, nak or progress ack goes to, never a second card.
	held      map[uint64]*pending
	stopped   bool
	clusterTk string

	// saving holds the budgets whose rate log is being saved, each with
	// whether sends were admitted since that save took the times (saveRate).
	rmu    sync.Mutex
	saving map[string]bool

	// lookups holds a slot per message queued for or in a delivered-record
	// lookup (nil: synchronous); arrivals are those messages in arrival
	// order until they join their groups (guarded by amu); queued are those
	// no read has taken yet, and readers the reads under way (guarded by qmu).
	lookups  chan struct{}
	amu      sync.Mutex
	arrivals []*arrival
	qmu      sync.Mutex
	queued   []*arrival
	readers  int
	batch    int // messages per read
	maxReads int
}

// arrival is a message whose delivered records are being looked up.
type arrival struct {
	p      *pending
	routes []*config.Route
	done   bool
}

// pending is one OPS message until every (route, receiver) it goes to is settled.
type pending struct {
	// msg is the current delivery; a redelivery of a held message replaces
	// it (guarded by Dispatcher.mu once the message is held).
	msg       Msg
	item      *notify.Item
	seq       uint64
	delivered uint64          // NumDelivered of the delivery Handle took
	remaining int             // guarded by Dispatcher.mu
	skip      map[string]bool // route+receiver pairs already settled before a redelivery
	// unread: a redelivery whose records could not be read (lookUp); it
	// is held back for a later delivery instead of being sent.
	unread bool
}

type group struct {
	key     string
	cluster string // the messages' cluster (Settings.Cluster unless Fleet)
	route   *config.Route
	items   []*pending
	timer   *time.Timer
	flushes int
	opened  time.Time // when its first message since the last flush joined
}

// New builds a dispatcher; Run starts its workers.
func New(s Settings, d Deps) *Dispatcher {
	if d.Now == nil {
		d.Now = time.Now
	}
	x := &Dispatcher{s: s, d: d, now: d.Now, workers: map[string]*worker{}, groups: map[string]*group{},
		pending: map[*pending]struct{}{}, held: map[uint64]*pending{}, clusterTk: subject.Encode(s.Cluster), saving: map[string]bool{}}
	for _, r := range d.Receivers {
		x.workers[r.Name] = newWorker(x, r)
	}
	if s.Lookups > 1 {
		x.lookups = make(chan struct{}, s.Lookups)
		x.batch = min(max(1, s.LookupBatch), s.Lookups)
		x.maxReads = max(1, s.Lookups/x.batch)
	}
	return x
}

// Run starts the receiver workers and the progress-ack loop, and blocks
// until ctx ends. It then stops the workers and naks every message still
// held, so another replica takes them at once instead of after AckWait.
func (x *Dispatcher) Run(ctx context.Context) {
	x.baseCtx = ctx
	for _, w := range x.workers {
		x.wg.Add(1)
		go func(w *worker) { defer x.wg.Done(); w.run(ctx) }(w)
	}
	interval := x.s.AckWait / 3
	if interval <= 0 {
		interval = 10 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			x.shutdown()
			return
		case <-t.C:
			x.keepAlive()
		}
	}
}

func (x *Dispatcher) shutdown() {
	x.mu.Lock()
	x.stopped = true
	for _, g := range x.groups {
		g.timer.Stop()
	}
	x.mu.Unlock()
	x.wg.Wait()
	x.mu.Lock()
	held := make([]Msg, 0, len(x.pending))
	for p := range x.pending {
		held = append(held, p.msg)
		x.forget(p)
	}
	x.pending = map[*pending]struct{}{}
	x.mu.Unlock()
	for _, m := range held {
		_ = m.Nak()
	}
	if len(held) > 0 {
		x.d.Log.Info().Int("messages", len(held)).Msg("released held messages for redelivery")
	}
	x.d.Metrics.Pending.Set(0)
	x.saveRates()
}

// keepAlive sends progress acks for every held message, to its current
// delivery (the one the server now tracks). Messages still waiting for
// their lookup are held too: a lookup that stalls longer than AckWait must
// not have them redelivered.
func (x *Dispatcher) keepAlive() {
	x.mu.Lock()
	held := make([]Msg, 0, len(x.held))
	for _, p := range x.held {
		held = append(held, p.msg)
	}
	for p := range x.pending {
		if p.seq == 0 { // no sequence, so not in held (only without metadata)
			held = append(held, p.msg)
		}
	}
	x.mu.Unlock()
	for _, m := range held {
		_ = m.InProgress()
	}
}

// adopt makes msg the current delivery of the held message with its stream
// sequence, if there is one, and reports whether there was: that message is
// already on its way (in a lookup, a group or a retry loop) and will be
// acked, nak'ed or kept alive through msg.
func (x *Dispatcher) adopt(seq uint64, msg Msg) bool {
	if seq == 0 {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.held[seq]
	if p == nil {
		return false
	}
	p.msg = msg
	return true
}

// hold registers p under its stream sequence until forget.
func (x *Dispatcher) hold(p *pending) {
	if p.seq == 0 {
		return
	}
	x.mu.Lock()
	x.held[p.seq] = p
	x.mu.Unlock()
}

// forget ends p's registration, not that of a later delivery of its
// sequence (a released message comes back as a new pending). It must be
// called with x.mu held.
func (x *Dispatcher) forget(p *pending) {
	if p.seq != 0 && x.held[p.seq] == p {
		delete(x.held, p.seq)
	}
}

// delivery is p's current delivery.
func (x *Dispatcher) delivery(p *pending) Msg {
	x.mu.Lock()
	defer x.mu.Unlock()
	return p.msg
}

// Handle takes one OPS message from the consumer.
func (x *Dispatcher) Handle(ctx context.Context, msg Msg) {
	var seq uint64
	var delivered uint64 = 1
	if md, err := msg.Metadata(); err == nil {
		seq, delivered = md.Sequence.Stream, md.NumDelivered
	}
	if x.adopt(seq, msg) {
		// Redelivered while held (a NATS outage longer than AckWait): the
		// first delivery's pending goes on with this one; checked before
		// MaxDeliver, as the outage, not this message, is what kept it unacked.
		x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "redelivered").Inc()
		return
	}
	if x.s.Fleet {
		if filter, foreign := ForeignSource(msg.Subject(), msg.Headers()); foreign {
			// Another cluster's subject inside this cluster's source: a
			// forgery by that cluster's side (docs/fleet.md#trust). Never a
			// card or outcome for the cluster the subject names.
			x.d.Log.Error().Str("subject", msg.Subject()).Str("source_filter", filter).Strs("sources", StreamSources(msg.Headers())).
				Uint64("seq", seq).Msg("OPS message outside the filter of the source it came through; terminated")
			x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "foreign_source").Inc()
			_ = msg.Term()
			return
		}
	}
	it, err := notify.Decode(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		x.d.Log.Warn().Err(err).Str("subject", msg.Subject()).Uint64("seq", seq).Msg("malformed OPS message terminated")
		x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "malformed").Inc()
		_ = msg.Term()
		return
	}
	if it.Kind == notify.KindIntent {
		// A write-ahead intent is for the actor's next leader; its outcome
		// (deleted, cordoned, ...) is the message people are told about.
		x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "intent").Inc()
		_ = msg.Ack()
		return
	}
	routes := x.d.Routes.Match(it)
	if !x.routesMine(routes) {
		x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "unrouted").Inc()
		_ = msg.Ack()
		return
	}
	routes = distinct(routes)
	p := &pending{msg: msg, item: it, seq: seq, delivered: delivered}
	if x.s.MaxDeliver > 0 && delivered >= uint64(x.s.MaxDeliver) && delivered > 1 {
		x.park(ctx, p, routes, delivered)
		return
	}
	x.hold(p)
	// Every delivery consults the records, not only redeliveries: a
	// re-created consumer, or an id stored again after the stream's
	// duplicate window, arrives with NumDelivered 1.
	if x.lookups == nil {
		x.lookUp(ctx, []*pending{p}, [][]*config.Route{routes})
		x.admit(p, routes)
		return
	}
	// Pipelined: the next message is taken while this one's records are
	// read; it joins its groups in arrival order once they are.
	a := &arrival{p: p, routes: routes}
	x.lookups <- struct{}{}
	x.amu.Lock()
	x.arrivals = append(x.arrivals, a)
	x.amu.Unlock()
	x.qmu.Lock()
	x.queued = append(x.queued, a)
	start := x.readers < x.maxReads
	if start {
		x.readers++
	}
	x.qmu.Unlock()
	if start {
		go x.read(ctx)
	}
}

// distinct drops a route whose name an earlier one has: a route's name is
// its identity (group keys, delivered records, dead letters), so an event
// both match would be listed twice in one card. The config refuses such
// routes; this keeps a table built without it consistent.
func distinct(routes []*config.Route) []*config.Route {
	for i := 1; i < len(routes); i++ {
		if named(routes[:i], routes[i].Name) {
			out := routes[:i:i] // full: appending copies, Match's slice stays as it is
			for _, r := range routes[i+1:] {
				if !named(out, r.Name) {
					out = append(out, r)
				}
			}
			return out
		}
	}
	return routes
}

func named(routes []*config.Route, name string) bool {
	for _, r := range routes {
		if r.Name == name {
			return true
		}
	}
	return false
}

// park dead-letters a message delivered MaxDeliver times without being
// settled (something, perhaps this message, keeps killing notifiers) for
// each of its (route, receiver) pairs the delivered records do not call
// settled, and acks it only if every dead letter was stored; otherwise it
// comes back (the consumer itself has no MaxDeliver, so it always does). A
// pair already delivered or dead-lettered (an earlier delivery got that far
// before the crash) is skipped and reported dropped, as lookUp does for any
// delivery: its receiver has the card, so it is no loss. Stored, the rest is
// a final result like any other give-up: a failed outcome (reason
// max_deliver) per pair, counted in deliveries_total and
// events_total, published only once all are stored so a redelivery after a
// failed store does not report it twice. The records are read, not written
// (docs/notifier.md: a delivered record written meanwhile by a replica still
// sending an earlier delivery must not be turned into dead).
func (x *Dispatcher) park(ctx context.Context, p *pending, routes []*config.Route, delivered uint64) {
	it := p.item
	x.lookUp(ctx, []*pending{p}, [][]*config.Route{routes})
	if p.unread {
		// Without its records a pair its receiver has would be dead-lettered
		// and reported failed: it waits for them like any redelivery.
		x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "records_unavailable").Inc()
		_ = p.msg.NakWithDelay(x.recordsRetry())
		return
	}
	x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "max_deliver").Inc()
	x.d.Log.Error().Str("subject", it.Subject).Str("id", it.ID).Uint64("deliveries", delivered).Msg("message redelivered too often; dead-lettering")
	cause := errors.New("redelivered too often without being settled")
	var failed []Outcome
	for _, r := range routes {
		for _, recv := range x.mine(r) {
			if p.skip[r.Name+"\x00"+recv] {
				continue
			}
			if err := x.deadLetter(ctx, r.Name, recv, p, reasonMaxDeliver, cause); err != nil {
				x.deadLetterFailed(recv, 1, err)
				return
			}
			failed = append(failed, Outcome{Receiver: recv, Route: r.Name, Cluster: x.clusterOf(it), Outcome: OutcomeFailed,
				Reason: reasonMaxDeliver, Events: 1, IDs: []string{it.ID}})
		}
	}
	for _, o := range failed {
		o.Time = x.now()
		x.report(o)
	}
	_ = p.msg.Ack()
}

// reasonMaxDeliver is the dead-letter and outcome reason of a message
// parked after MaxDeliver deliveries.
const reasonMaxDeliver = "max_deliver"

// report counts a final result in deliveries_total and events_total and
// publishes it on notify.<cluster>.<receiver>.<outcome>: every final result
// (delivered, dead-lettered by a worker, parked after MaxDeliver) goes
// through here, so the metrics and the outcome subject agree.
func (x *Dispatcher) report(o Outcome) {
	x.d.Metrics.Deliveries.WithLabelValues(o.Receiver, o.Outcome).Inc()
	x.d.Metrics.Events.WithLabelValues(o.Receiver, o.Outcome).Add(float64(o.Events))
	_ = publishOutcome(x.d.Core, subject.Notify(o.Cluster, o.Receiver, o.Outcome), o)
}

// read looks up queued messages, up to batch at a time, until none is
// queued, admitting those whose turn has come after each read.
func (x *Dispatcher) read(ctx context.Context) {
	for {
		x.qmu.Lock()
		n := min(len(x.queued), x.batch)
		if n == 0 {
			x.readers--
			x.qmu.Unlock()
			return
		}
		taken := make([]*arrival, n)
		copy(taken, x.queued)
		clear(x.queued[:n])
		x.queued = x.queued[n:]
		x.qmu.Unlock()
		ps := make([]*pending, n)
		rs := make([][]*config.Route, n)
		for i, a := range taken {
			ps[i], rs[i] = a.p, a.routes
		}
		x.lookUp(ctx, ps, rs)
		x.amu.Lock()
		for _, a := range taken {
			a.done = true
			<-x.lookups
		}
		for len(x.arrivals) > 0 && x.arrivals[0].done {
			next := x.arrivals[0]
			x.arrivals[0] = nil
			x.arrivals = x.arrivals[1:]
			x.admit(next.p, next.routes)
		}
		x.amu.Unlock()
	}
}

// lookUp reads the delivered records of each message's (route, receiver)
// pairs, in one States read, and marks those already settled to be skipped.
func (x *Dispatcher) lookUp(ctx context.Context, ps []*pending, routes [][]*config.Route) {
	type pair struct {
		p     *pending
		route string
		recv  string
	}
	var keys []string
	var pairs []pair
	for i, p := range ps {
		p.skip = map[string]bool{}
		for _, r := range routes[i] {
			for _, recv := range x.mine(r) {
				keys = append(keys, DeliveredKey(x.clusterOf(p.item), r.Name, recv, p.item.ID))
				pairs = append(pairs, pair{p, r.Name, recv})
			}
		}
	}
	var recs []Record
	var err error
	if len(keys) == 1 {
		recs = make([]Record, 1)
		recs[0], err = x.d.Delivered.State(ctx, keys[0])
	} else {
		recs, err = x.d.Delivered.States(ctx, keys)
	}
	if err != nil && ctx.Err() == nil { // after shutdown began the messages are nak'ed anyway
		// A redelivery may have been sent already (its ack lost in a crash)
		// and only its records can tell: it waits for them (admit). A first
		// delivery is almost never recorded (a re-created consumer, an id
		// stored again after the duplicate window), and holding every new
		// message while the bucket is degraded would stop all cards.
		held := 0
		for _, p := range ps {
			if p.delivered > 1 {
				p.unread = true
				held++
			}
		}
		x.d.Log.Warn().Err(err).Str("consumer", x.s.Consumer).Int("messages", len(ps)).Int("redeliveriesHeld", held).
			Dur("retryIn", x.recordsRetry()).Msg("cannot read delivered records; holding redeliveries, delivering first deliveries")
	}
	for i, rec := range recs {
		if rec == RecordNone {
			continue
		}
		pr, it := pairs[i], pairs[i].p.item
		pr.p.skip[pr.route+"\x00"+pr.recv] = true
		reason := "already_delivered"
		if rec == RecordDeadLettered {
			reason = "already_dead_lettered"
		}
		_ = publishOutcome(x.d.Core, subject.Notify(x.clusterOf(it), pr.recv, OutcomeDropped),
			Outcome{Receiver: pr.recv, Route: pr.route, Cluster: x.clusterOf(it), Outcome: OutcomeDropped, Reason: reason, Events: 1, IDs: []string{it.ID}, Time: x.now()})
	}
}

// recordsRetry is how long a redelivery whose records could not be read
// waits before it comes back: AckWait, as if its replica had died.
func (x *Dispatcher) recordsRetry() time.Duration {
	if x.s.AckWait > 0 {
		return x.s.AckWait
	}
	return 30 * time.Second
}

// admit puts a looked-up message into its groups, or acks it when nothing
// is left to deliver. After shutdown began it is nak'ed instead, for
// another replica.
func (x *Dispatcher) admit(p *pending, routes []*config.Route) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stopped {
		x.forget(p)
		_ = p.msg.Nak()
		return
	}
	if p.unread {
		x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "records_unavailable").Inc()
		x.forget(p)
		_ = p.msg.NakWithDelay(x.recordsRetry())
		return
	}
	for _, r := range routes {
		n := 0
		for _, recv := range x.mine(r) {
			if !p.skip[r.Name+"\x00"+recv] {
				n++
			}
		}
		if n == 0 {
			continue
		}
		p.remaining += n
		x.addToGroup(r, p)
	}
	if p.remaining == 0 {
		if len(p.skip) > 0 {
			x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "duplicate").Inc()
		} else {
			x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "unrouted").Inc()
		}
		x.forget(p)
		_ = p.msg.Ack()
		return
	}
	x.d.Metrics.Messages.WithLabelValues(x.s.Consumer, "routed").Inc()
	x.pending[p] = struct{}{}
	x.d.Metrics.Pending.Set(float64(len(x.pending)))
}

// clusterOf is the cluster a message belongs to: on a fleet notifier its
// subject's token, else the notifier's own cluster (whose messages are the
// only ones its consumer reads; ids and keys stay what they were).
func (x *Dispatcher) clusterOf(it *notify.Item) string {
	if x.s.Fleet {
		return it.Cluster
	}
	return x.s.Cluster
}

// clusterToken is clusterOf as a subject token.
func (x *Dispatcher) clusterToken(it *notify.Item) string {
	if x.s.Fleet {
		return it.Cluster
	}
	return x.clusterTk
}

// groupKey is route/kind, and route/cluster/kind on a fleet notifier: one
// card never mixes clusters.
func (x *Dispatcher) groupKey(routeName string, it *notify.Item) string {
	if x.s.Fleet {
		return routeName + "/" + it.Cluster + "/" + string(it.Kind)
	}
	return routeName + "/" + string(it.Kind)
}

// addToGroup must be called with x.mu held.
func (x *Dispatcher) addToGroup(r *config.Route, p *pending) {
	key := x.groupKey(r.Name, p.item)
	g, ok := x.groups[key]
	if !ok {
		g = &group{key: key, cluster: x.clusterOf(p.item), route: r, opened: time.Now()}
		x.groups[key] = g
		g.timer = time.AfterFunc(r.GroupWait.Duration, func() { x.flush(g) })
		x.d.Metrics.Groups.Set(float64(len(x.groups)))
	}
	g.items = append(g.items, p)
}

// flush sends what a group collected; a group that collected nothing since
// its last flush is closed, so the next event waits GroupWait again.
func (x *Dispatcher) flush(g *group) {
	x.mu.Lock()
	if x.stopped {
		x.mu.Unlock()
		return
	}
	items := g.items
	g.items = nil
	if len(items) == 0 {
		delete(x.groups, g.key)
		x.d.Metrics.Groups.Set(float64(len(x.groups)))
		x.mu.Unlock()
		return
	}
	g.flushes++
	g.timer.Reset(g.route.GroupInterval.Duration)
	opened := g.opened
	g.opened = time.Now() // the next flush's messages wait from here
	x.mu.Unlock()

	now := x.now()
	t0 := time.Now()
	defer func() {
		x.d.Log.Debug().Str("consumer", x.s.Consumer).Str("group", g.key).Int("events", len(items)).Time("opened", opened).
			Dur("renderMs", time.Since(t0)).Msg("group flushed")
	}()
	for _, recv := range x.mine(g.route) {
		var mine []*pending
		var its []*notify.Item
		for _, p := range items {
			if !p.skip[g.route.Name+"\x00"+recv] {
				mine = append(mine, p)
				its = append(its, p.item)
			}
		}
		if len(mine) == 0 {
			continue
		}
		w := x.workers[recv]
		ns := render.Render(render.Group{Route: g.route.Name, Key: g.key, Title: g.route.Title, Cluster: g.cluster,
			ClusterInTitle: x.s.Fleet, Now: now, Locale: w.r.Locale}, its)
		for _, n := range ns {
			n.Receiver = recv
			w.enqueue(&batch{n: n, route: g.route.Name, cluster: g.cluster, entries: entriesOf(n, mine)})
		}
	}
}

// entriesOf returns the pending messages a notification accounts for.
func entriesOf(n *notify.Notification, all []*pending) []*pending {
	if len(n.Items) == len(all) {
		return all
	}
	in := make(map[*notify.Item]bool, len(n.Items))
	for _, it := range n.Items {
		in[it] = true
	}
	var out []*pending
	for _, p := range all {
		if in[p.item] {
			out = append(out, p)
		}
	}
	return out
}

// settle marks one (route, receiver) of each entry done and acks the
// messages that have nothing left.
func (x *Dispatcher) settle(entries []*pending) {
	var done []*pending
	var msgs []Msg // their current deliveries, taken while they are held
	x.mu.Lock()
	for _, p := range entries {
		p.remaining--
		if p.remaining == 0 {
			if _, held := x.pending[p]; held {
				delete(x.pending, p)
				x.forget(p)
				done = append(done, p)
				msgs = append(msgs, p.msg)
			}
		}
	}
	x.d.Metrics.Pending.Set(float64(len(x.pending)))
	x.mu.Unlock()
	for i, p := range done {
		if err := msgs[i].Ack(); err != nil {
			x.d.Log.Warn().Err(err).Uint64("seq", p.seq).Msg("ack failed; the message will be redelivered and skipped as delivered")
		}
	}
}

// mine returns the receivers of r this dispatcher delivers to. The service
// runs one dispatcher (and one consumer) per receiver, so a receiver that is
// down holds only its own consumer's messages. A receiver listed twice is
// one: (route, receiver) is the identity of a card, a delivered record and
// a dead letter, so twice would send every event twice and count the
// message settled twice. The config refuses such a list; this keeps a
// table built without it consistent.
func (x *Dispatcher) mine(r *config.Route) []string {
	out := make([]string, 0, len(r.Receivers))
	for _, recv := range r.Receivers {
		if x.workers[recv] != nil && !slices.Contains(out, recv) {
			out = append(out, recv)
		}
	}
	return out
}

func (x *Dispatcher) routesMine(routes []*config.Route) bool {
	for _, r := range routes {
		if len(x.mine(r)) > 0 {
			return true
		}
	}
	return false
}

// release stops holding messages whose dead letters could not be stored:
// no ack, no more progress acks, so JetStream redelivers them after
// AckWait/BackOff. Parts of them that other groups still deliver are
// recorded as delivered and skipped on the redelivery.
func (x *Dispatcher) release(entries []*pending) {
	x.mu.Lock()
	for _, p := range entries {
		delete(x.pending, p)
		x.forget(p) // its redelivery is a new message, looked up afresh
	}
	x.d.Metrics.Pending.Set(float64(len(x.pending)))
	x.mu.Unlock()
}

// deadLetterFailed says loudly that events stay unacknowledged.
func (x *Dispatcher) deadLetterFailed(recv string, events int, err error) {
	x.d.Metrics.DeadLetterErrors.WithLabelValues(recv).Inc()
	x.d.Log.Error().Err(err).Str("receiver", recv).Int("events", events).Str("stream", DeadLetterStream).
		Msg("CANNOT STORE DEAD LETTERS: not acknowledging; the OPS messages stay pending and are redelivered until the DLQ stream accepts them")
}

// deadLetter stores one event for one receiver on the DLQ stream. Only a nil
// error means it is stored.
func (x *Dispatcher) deadLetter(ctx context.Context, routeName, recv string, p *pending, reason string, cause error) error {
	m := nats.NewMsg(DeadLetterSubject(x.clusterToken(p.item), recv))
	msg := x.delivery(p) // every delivery carries the same headers and data
	for k, v := range msg.Headers() {
		if isServerHeader(k) {
			continue
		}
		m.Header[k] = append([]string(nil), v...)
	}
	id := "dlq/" + routeName + "/" + recv + "/" + p.item.ID
	if x.s.Fleet {
		// Ids of different clusters may be equal (any id that names no object UID).
		id = "dlq/" + p.item.Cluster + "/" + routeName + "/" + recv + "/" + p.item.ID
	}
	m.Header.Set(nats.MsgIdHdr, id)
	m.Header.Set(HeaderDLQReceiver, recv)
	m.Header.Set(HeaderDLQRoute, routeName)
	m.Header.Set(HeaderDLQReason, reason)
	if cause != nil {
		m.Header.Set(HeaderDLQError, cause.Error())
	}
	m.Header.Set(HeaderOrigSubject, p.item.Subject)
	if p.seq > 0 {
		m.Header.Set(HeaderOrigSeq, uitoa(p.seq))
	}
	m.Data = msg.Data()
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadLetterBudget)
	defer cancel()
	if err := publishRetry(pctx, x.d.DeadJS, m); err != nil {
		return err
	}
	x.d.Metrics.DeadLetters.WithLabelValues(recv, reason).Inc()
	return nil
}

// isServerHeader: the headers JetStream itself reads on a publish
// (Nats-Msg-Id, Nats-Expected-*, Nats-TTL) or refuses from a client: a
// message of a sourced stream (a hub's fleet stream) carries
// Nats-Stream-Source, and a publish with it fails ("message stream source
// header is not allowed"), so a dead letter copied with it could never be
// stored. The ce-* headers, which make the dead letter replayable, are kept.
func isServerHeader(k string) bool {
	return len(k) >= 5 && strings.EqualFold(k[:5], "Nats-")
}

// deadLetterBudget bounds the retries of one dead-letter write; the receiver's
// queue waits meanwhile, and a failure leaves the messages for redelivery.
const deadLetterBudget = 5 * time.Second

// saveRate saves the receiver's budget in the background, right after a
// send was admitted. Never between the slot and the send: the limiter
// records a send at its slot, so a send delayed past it (a KV put takes up
// to a second on a degraded bucket) would go out together with those
// admitted after it, over the receiver's limit. One save per budget runs
// at a time; sends admitted meanwhile are saved by the next one, which
// takes the budget's times as they are then.
func (x *Dispatcher) saveRate(r Receiver) {
	if x.d.RateLog == nil || r.Budget == "" {
		return
	}
	x.rmu.Lock()
	if _, running := x.saving[r.Budget]; running {
		x.saving[r.Budget] = true
		x.rmu.Unlock()
		return
	}
	x.saving[r.Budget] = false
	x.rmu.Unlock()
	go func() {
		for {
			x.saveRateNow(r)
			x.rmu.Lock()
			if !x.saving[r.Budget] {
				delete(x.saving, r.Budget)
				x.rmu.Unlock()
				return
			}
			x.saving[r.Budget] = false
			x.rmu.Unlock()
		}
	}()
}

// saveRateNow saves the receiver's budget, bounded by rateSaveTimeout.
func (x *Dispatcher) saveRateNow(r Receiver) {
	ctx, cancel := context.WithTimeout(context.Background(), rateSaveTimeout)
	defer cancel()
	if err := x.d.RateLog.Save(ctx, r.Budget, r.Limiter.Sends()); err != nil {
		x.d.Log.Debug().Err(err).Str("receiver", r.Name).Msg("cannot save the rate log")
	}
}

// saveRates saves every receiver's budget once more when the dispatcher
// stops, so the next active replica finds the last sends even if a
// background save was still under way.
func (x *Dispatcher) saveRates() {
	if x.d.RateLog == nil {
		return
	}
	for _, w := range x.workers {
		if w.r.Budget != "" {
			x.saveRateNow(w.r)
		}
	}
}

// rateSaveTimeout bounds one save of a rate log.
const rateSaveTimeout = time.Second

func uitoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

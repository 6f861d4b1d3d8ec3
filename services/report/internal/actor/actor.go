// Package actor is the report service: while it holds the lease it mirrors
// the cluster state from KUBE, sends the restart report on its schedule and
// on request, and alerts on node image storage.
//
// The report actor writes nothing to the cluster, so it has no actuator: its
// only outputs are OPS events, each with an idempotent id (the schedule tick
// for reports, the node's resourceVersion for alerts), which is what keeps
// two replicas or a leadership change from sending anything twice.
package actor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/services/report/internal/images"
	"github.com/opswire/opswire/services/report/internal/restarts"
	"github.com/opswire/opswire/services/report/internal/schedule"
	"github.com/opswire/opswire/services/report/internal/store"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/pause"
)

// Service is the name in subjects, sources and the Lease.
const Service = "report"

// publishAttempt bounds one publish attempt; PublishEvent retries with the
// same id until its context ends.
const publishAttempt = 5 * time.Second

// Subscriber is the part of *nats.Conn the actor uses for ctl requests.
type Subscriber interface {
	QueueSubscribe(subj, queue string, cb nats.MsgHandler) (*nats.Subscription, error)
}

// Deps are the actor's collaborators; the actor builds no clients itself.
type Deps struct {
	Config  *config.Config
	Cluster string
	JS      jetstream.JetStream
	NC      Subscriber
	// MaxPayload is the server's message size limit; reports are cut to fit.
	MaxPayload int64
	Log        zerolog.Logger
	Registry   prometheus.Registerer
	// Getenv reads $TZ (required); Clock defaults to the real one.
	Getenv func(string) string
	Clock  Clock
	// Pause tells whether a pause record holds the report actor (a
	// *pause.Watcher); nil: never paused.
	Pause Pauser
}

// Pauser tells whether the actor is paused now, and by which record.
type Pauser interface {
	Paused() (pause.Record, bool)
}

// Clock is the actor's time. Now is the wall clock, in which schedules are
// written. After is a timer, and Go timers run on the monotonic clock, which
// stops while the machine is suspended and ignores steps of the wall clock
// (NTP): a wait on it can end long after the wall time it was meant for.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Actor is one replica of the report service.
type Actor struct {
	cfg        *config.Config
	cluster    string
	js         jetstream.JetStream
	nc         Subscriber
	maxPayload int
	log        zerolog.Logger
	reg        prometheus.Registerer
	clock      Clock
	sched      *schedule.Schedule
	opts       restarts.Options
	thresholds images.Thresholds
	m          *metrics
	pause      Pauser

	// leading is set for the whole of a leader term, serving once the state
	// is loaded and requests are answered; Ready reports the gap.
	leading, serving atomic.Bool

	// run is a one-slot semaphore that serialises report runs (schedule and
	// requests) and guards baseline; unlike a mutex, waiting for it ends
	// with the waiter's context (lockRun).
	run      chan struct{}
	baseline *restarts.Baseline
	// saved is what the KV bucket holds of the baseline, the reference the
	// next save writes the difference from (restarts.Unknown after a failed
	// save, so the next one rewrites it in full).
	saved *restarts.Baseline
}

// New validates what the configuration cannot (the $TZ zone) and builds the actor.
func New(d Deps) (*Actor, error) {
	if d.Getenv == nil {
		return nil, errors.New("actor: Getenv is required")
	}
	if d.Clock == nil {
		d.Clock = realClock{}
	}
	sr := d.Config.SendReport
	loc, err := schedule.Location(sr.Timezone, d.Getenv)
	if err != nil {
		return nil, err
	}
	sched, err := schedule.Parse(sr.Schedule, loc)
	if err != nil {
		return nil, err
	}
	maxPayload := int(d.MaxPayload)
	if maxPayload <= 0 {
		maxPayload = 1 << 20
	}
	return &Actor{
		cfg: d.Config, cluster: d.Cluster, js: d.JS, nc: d.NC, maxPayload: maxPayload,
		log: d.Log, reg: d.Registry, clock: d.Clock, sched: sched,
		opts: restarts.OptionsFrom(sr), thresholds: images.ThresholdsFrom(d.Config.ImageAlert),
		m: newMetrics(d.Registry), run: make(chan struct{}, 1), pause: d.Pause,
	}, nil
}

// now reads the wall clock.
func (a *Actor) now() time.Time { return a.clock.Now() }

// lockRun takes the run slot, or gives up when ctx ends.
func (a *Actor) lockRun(ctx context.Context) error {
	select {
	case a.run <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (a *Actor) unlockRun() { <-a.run }

// Ready is the readiness check: a leader is ready once it holds the cluster
// state and answers requests; a standby is always ready (it has nothing to
// do until it leads).
func (a *Actor) Ready() error {
	if a.leading.Load() && !a.serving.Load() {
		return errors.New("leader starting: loading the cluster state from KUBE")
	}
	return nil
}

// Lead is the leader's work; it returns when ctx ends (leadership lost or shutdown).
func (a *Actor) Lead(ctx context.Context) error {
	a.leading.Store(true)
	defer a.leading.Store(false)
	defer a.serving.Store(false)
	var st *store.Store
	if !a.retryStart(ctx, "open the report KV bucket", "open", func(ctx context.Context) (err error) {
		st, err = a.openStore(ctx)
		return err
	}) {
		return nil // the term ended first
	}

	nodes := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "image-alerts"})
	defer nodes.ShutDown()
	alertsOn := a.cfg.ImageAlert.Enable
	mirror := kubestate.New(a.js, a.cluster, a.log, a.reg, kubestate.Handlers{
		OnNode: func(old, cur *events.NodeState) {
			if !alertsOn {
				return
			}
			// Only the name is queued: the worker reads the latest state.
			// A tombstone (cur nil) queues the old name, so the worker
			// drops the deleted node's memory.
			for _, s := range []*events.NodeState{cur, old} {
				if s != nil && s.Name != "" {
					nodes.Add(s.Name)
					return
				}
			}
		},
	})

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mirror.Run(ctx); err != nil {
			a.log.Error().Err(err).Msg("KUBE mirror stopped")
		}
	}()
	if err := mirror.WaitSynced(ctx); err != nil {
		return nil // shutting down before the state was loaded
	}

	if a.opts.Mode == config.ReportModeIncrease && !a.loadBaseline(ctx, st) {
		return nil // the term ended first
	}
	if alertsOn {
		var mem map[string]images.Memory
		if !a.retryStart(ctx, "load the image alert memory", "images", func(ctx context.Context) (err error) {
			mem, err = st.LoadImageMemory(ctx)
			return err
		}) {
			return nil
		}
		al := &alerter{a: a, q: nodes, mirror: mirror, st: st, mem: mem}
		// Nodes deleted (or re-created) while no replica led: let the worker
		// compare each remembered UID with the mirror and forget the gone.
		for _, m := range mem {
			nodes.Add(m.Node)
		}
		wg.Add(1)
		go func() { defer wg.Done(); al.run(ctx) }()
	}

	sizes, err := st.LoadReportSizes(ctx)
	if err != nil {
		a.m.storeErrors.WithLabelValues("budget").Inc()
		a.log.Warn().Err(err).Msg("cannot load the report sizes; the budget counts every stored report as a full message")
	}
	rep := &reporter{a: a, mirror: mirror, st: st, sizes: sizes}
	// The schedule runs the ticks after this moment: one that comes due
	// while catch-up still retries is then run or counted, not skipped.
	// Catch-up looks at the ticks up to the same moment, so a tick falling
	// between the two is the schedule's alone, not run twice.
	scheduleFrom := a.now()
	if a.cfg.SendReport.Enable {
		// Before answering requests, so a request answered proves it is done.
		rep.catchUp(ctx, scheduleFrom)
	}
	var sub *nats.Subscription
	if !a.retryStart(ctx, "subscribe to report requests", "", func(context.Context) (err error) {
		sub, err = a.serveRequests(ctx, rep)
		return err
	}) {
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	a.serving.Store(true)

	a.log.Info().Bool("report", a.cfg.SendReport.Enable).Str("schedule", a.sched.String()).
		Str("timezone", a.sched.Location().String()).Bool("imageAlerts", alertsOn).Msg("leading")
	if a.cfg.SendReport.Enable {
		rep.runSchedule(ctx, scheduleFrom)
	}
	<-ctx.Done()
	return nil
}

// openAttempt bounds one attempt to open the bucket: a bucket the NATS user
// may not create (a permissions error gets no reply) must show up as a
// failing, logged attempt, not a silent hang.
const openAttempt = 30 * time.Second

// openStore opens (creating if needed) the report bucket.
func (a *Actor) openStore(ctx context.Context) (*store.Store, error) {
	octx, cancel := context.WithTimeout(ctx, openAttempt)
	defer cancel()
	kv, err := store.Open(octx, a.js, a.cfg.NATS.Replicas)
	if err != nil {
		return nil, fmt.Errorf("report KV bucket: %w", err)
	}
	return store.New(kv, a.cluster), nil
}

// loadBaseline loads the increase-mode baseline for this term; false when
// the term ended first. A baseline time that does not decode is no baseline
// (logged, counted): it is the same bad value for every replica, so failing
// would make them all crash-loop; the next scheduled report then counts from
// pod start and saves a good baseline over it.
func (a *Actor) loadBaseline(ctx context.Context, st *store.Store) bool {
	var b *restarts.Baseline
	if !a.retryStart(ctx, "load the restart baseline", "baseline", func(ctx context.Context) error {
		var err error
		b, err = st.LoadBaseline(ctx)
		if errors.Is(err, store.ErrMalformed) {
			a.m.storeErrors.WithLabelValues("baseline").Inc()
			a.log.Error().Err(err).Msg("the restart baseline in KV does not decode: starting without one (the next report counts from pod start)")
			b = nil
			return nil
		}
		return err
	}) {
		return false
	}
	if err := a.lockRun(ctx); err != nil {
		return false
	}
	a.baseline, a.saved = b, b
	a.unlockRun()
	return true
}

// startBackoffMax caps the wait between attempts of a term-start step.
const startBackoffMax = 30 * time.Second

// retryStart runs one step of a leader term's start until it succeeds
// (true) or the term ends (false). A KV or NATS hiccup at start is
// transient and hits every replica alike: ending the process for it would
// make them all crash-loop, and the step only matters within this term.
// Readiness reports the leader as starting meanwhile; each failure is
// logged, and counted in store_errors{op} when op is set.
func (a *Actor) retryStart(ctx context.Context, what, op string, step func(context.Context) error) bool {
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := step(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if op != "" {
			a.m.storeErrors.WithLabelValues(op).Inc()
		}
		a.log.Warn().Err(err).Int("attempt", attempt).Dur("retryIn", backoff).
			Msg("leader start: cannot " + what + "; retrying within this term")
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, startBackoffMax)
	}
}

package actuate

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/server"
)

// AuditGrace is how long an actor keeps storing its audit backlog after it
// stopped: the actions happened, their audits should reach OPS.
const AuditGrace = 5 * time.Second

// Leadership is the lease election an actor writes under (leader.Elector):
// Run calls work once per term, with a context that ends with the term.
type Leadership interface {
	IsLeader() bool
	Run(ctx context.Context, work func(ctx context.Context) error) error
}

// Readiness takes the named checks of the readiness endpoint (server.Server).
type Readiness interface {
	AddReadiness(name string, check server.Check)
}

// StateMirror is the cluster state a term decides with (kubestate.Mirror).
type StateMirror interface {
	Run(ctx context.Context) error
	WaitSynced(ctx context.Context) error
	Synced() bool
}

// Term is what an actor builds for one leadership term: a term starts from
// fresh state, so nothing a lost lease left half-done leaks into the next.
type Term struct {
	// Mirror is loaded from KUBE before anything is decided.
	Mirror StateMirror
	// Recovery is read back before the first write (SeedAndRecover).
	Recovery Recovery
	// Run is the actor's controller; it acts until ctx ends. An error ends
	// the term and is what Lead returns.
	Run func(ctx context.Context) error
}

// TermConfig is what differs between the actors' terms besides the Term.
type TermConfig struct {
	// MaxActions per Per bound the term's writes (NewWindow).
	MaxActions int
	Per        time.Duration
	// DryRun: nothing is written, so there is nothing to recover and no
	// window to seed; the controller starts once the mirror is loaded.
	DryRun bool
	// Unready is the readiness failure of a leader whose mirror is not
	// loaded yet.
	Unready string
}

// Terms is the wiring every actor shares: the audit publisher and the intent
// journal, which outlive leadership (what was done is stored even after the
// lease is gone), and the terms run under the lease.
type Terms struct {
	// Audit stores the actor's outcomes in OPS; Close flushes it.
	Audit *Auditor
	// Journal stores each write's intent before the write: a leader killed
	// before its outcome is stored leaves the intent for the next leader.
	Journal *Journal

	js      jetstream.JetStream
	m       *Metrics
	log     zerolog.Logger
	current atomic.Pointer[Term]
}

// NewTerms registers the write path's metrics on reg and starts the
// Auditor with opts. Call Close when the process stops.
func NewTerms(js jetstream.JetStream, reg prometheus.Registerer, log zerolog.Logger, opts ...AuditorOption) *Terms {
	m := NewMetrics(reg)
	return &Terms{Audit: NewAuditor(js, 0, m, log, opts...), Journal: NewJournal(js, 0, m, log), js: js, m: m, log: log}
}

// Close stores what is left of the audit backlog for up to AuditGrace.
func (t *Terms) Close() { t.Audit.Close(AuditGrace) }

// Lead registers the "kube-state" readiness check and runs a term each time
// el leads. Each term gets a fresh window from cfg and is built by start;
// then its mirror runs, and once it is loaded (and, unless dry-run, the
// window seeded and the last leaders' intents recovered from OPS) the
// controller runs. Nothing is written before all of that is done. A term
// whose context ends before then ends without error.
func (t *Terms) Lead(ctx context.Context, el Leadership, ready Readiness, cfg TermConfig, start func(w *Window) Term) error {
	ready.AddReadiness("kube-state", func() error {
		// Standbys are ready; the leader once it holds the cluster state.
		if cur := t.current.Load(); el.IsLeader() && (cur == nil || !cur.Mirror.Synced()) {
			return errors.New(cfg.Unready)
		}
		return nil
	})
	return el.Run(ctx, func(ctx context.Context) error {
		w := NewWindow(cfg.MaxActions, cfg.Per)
		term := start(w)
		t.current.Store(&term)
		return t.run(ctx, term, w, cfg.DryRun)
	})
}

// run runs the mirror beside the rest of the term; the first error of
// either ends both and is returned, after both have returned.
func (t *Terms) run(ctx context.Context, term Term, w *Window, dryRun bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		if err != nil {
			once.Do(func() { first = err; cancel() })
		}
	}
	wg.Go(func() { fail(term.Mirror.Run(ctx)) })
	wg.Go(func() { fail(t.act(ctx, term, w, dryRun)) })
	wg.Wait()
	return first
}

// act waits for the mirror, recovers, then hands over to the controller.
func (t *Terms) act(ctx context.Context, term Term, w *Window, dryRun bool) error {
	if err := term.Mirror.WaitSynced(ctx); err != nil {
		return nil // the term or the process ended first
	}
	// The previous leaders' actions count against this leader's window,
	// and their journaled writes whose audit never reached OPS are audited
	// now.
	if !dryRun {
		if err := SeedAndRecover(ctx, t.js, w, term.Recovery, t.m, t.log, nil); err != nil {
			return nil
		}
	}
	return term.Run(ctx)
}

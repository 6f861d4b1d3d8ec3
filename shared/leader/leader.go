// Package leader runs an actor's work only while it holds a Lease, using
// client-go's leaderelection.
//
// The work of one term runs with a context that ends the moment this replica
// can no longer be sure it leads: when the lease has not been renewed for
// renewDeadline (checked here, before client-go gives up and long before
// another replica may take the lease at leaseDuration), when client-go reports
// the lease lost, or at shutdown. The lease is released only after the work
// has returned, so nothing acts once a standby may have taken over, and a
// clean shutdown hands over at once.
//
// Losing the lease does not end the process: the elector campaigns again, with
// backoff, as a standby would. The next term's work starts only after the
// previous term's work has returned.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLostLeadership is the cause (context.Cause) of a term's context when it
// ended because the lease was lost or could not be renewed in time.
var ErrLostLeadership = errors.New("lost leadership")

// errShutdown is the cause of a term's context at shutdown.
var errShutdown = errors.New("shutting down")

// Config of one election.
type Config struct {
	Enabled       bool // false runs the work at once, without a Lease (development)
	Name          string
	Namespace     string
	Identity      string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Elector runs work under a Lease and reports whether it leads.
type Elector struct {
	cfg     Config
	client  kubernetes.Interface
	log     zerolog.Logger
	leading atomic.Bool
	// terms counts the terms this replica led; lost those that ended
	// because the lease was lost (not at shutdown, not by the work).
	terms, lost atomic.Int64
	// workMu is held by a term's work while it runs: the next term's work
	// cannot start before it is released, and the lease is not released
	// before it is.
	workMu sync.Mutex
	// OnChange, when set, is told of every leadership change (for metrics).
	OnChange func(leading bool)
	// OnRefused, when set, is told when the API starts refusing this
	// replica's access to the Lease (once per refusal, not per retry).
	OnRefused func(error)
	refused   atomic.Pointer[error]
}

// New builds an elector.
func New(client kubernetes.Interface, cfg Config, log zerolog.Logger) *Elector {
	return &Elector{cfg: cfg, client: client, log: log}
}

// Refused is the API's refusal of this replica's last access to its Lease
// (403 or 401), or nil. While it lasts the replica can never lead: its
// credentials may not read or write the Lease where the config puts it.
func (e *Elector) Refused() error {
	if p := e.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// observe keeps a refusal until an access succeeds; other errors (a timeout,
// a conflict) say nothing about whether the replica may lead.
func (e *Elector) observe(err error) {
	switch {
	case err == nil:
		if e.refused.Swap(nil) != nil {
			e.log.Info().Str("lease", e.cfg.Namespace+"/"+e.cfg.Name).Msg("the Lease is accessible again")
		}
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		if e.refused.Swap(&err) == nil {
			e.log.Error().Err(err).Str("lease", e.cfg.Namespace+"/"+e.cfg.Name).
				Msg("may not access the Lease: this replica cannot lead until RBAC or controller.leaseLockNamespace changes")
			if e.OnRefused != nil {
				e.OnRefused(err)
			}
		}
	}
}

// IsLeader reports whether this replica's work currently runs as leader.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

// Terms is the number of terms this replica has led (work started).
func (e *Elector) Terms() int64 { return e.terms.Load() }

// Lost is the number of terms that ended because the lease was lost.
func (e *Elector) Lost() int64 { return e.lost.Load() }

func (e *Elector) set(v bool) {
	e.leading.Store(v)
	if e.OnChange != nil {
		e.OnChange(v)
	}
}

// Run blocks until ctx ends or work returns on its own. Each time this
// replica acquires the lease, work runs with a context that is cancelled the
// moment leadership ends (its cause is ErrLostLeadership when the lease was
// lost); after a lost lease Run campaigns again, waiting RetryPeriod, doubled
// after each term shorter than LeaseDuration, up to LeaseDuration. Run
// returns after the last work has returned: nil on shutdown, work's result
// when work returned while it still led.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context) error) error {
	if !e.cfg.Enabled {
		e.log.Warn().Msg("leader election disabled: acting as the only replica")
		e.terms.Add(1)
		e.set(true)
		defer e.set(false)
		err := work(ctx)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	backoff := e.cfg.RetryPeriod
	for {
		res, err := e.term(ctx, work)
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return nil
		case res.ended:
			return res.err
		}
		e.lost.Add(1)
		if res.led >= e.cfg.LeaseDuration {
			backoff = e.cfg.RetryPeriod
		}
		e.log.Warn().Str("lease", e.cfg.Namespace+"/"+e.cfg.Name).Dur("led", res.led).Dur("backoff", backoff).
			Msg("lost the lease; stopped acting, campaigning again")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, e.cfg.LeaseDuration)
	}
}

// termResult is how one term ended.
type termResult struct {
	ended bool          // work returned while it still led
	err   error         // work's result then
	led   time.Duration // how long the work ran
}

// term campaigns until it holds the lease, runs work, and returns once the
// term is over and its work has returned.
func (e *Elector) term(ctx context.Context, work func(ctx context.Context) error) (termResult, error) {
	lock := newRenewLock(&resourcelock.LeaseLock{
		LeaseMeta:  metaFor(e.cfg),
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}, e.observe)
	// The elector's context is not ctx: at shutdown the work is stopped
	// first and the lease released (client-go releases when this context
	// ends) only after the work has returned.
	electCtx, stopElect := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElect()
	stopOnShutdown := context.AfterFunc(ctx, func() {
		e.workMu.Lock() // the work, told by its own AfterFunc, has returned
		e.workMu.Unlock()
		stopElect()
	})
	defer stopOnShutdown()

	var res termResult // written by the work goroutine under workMu
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.cfg.Name,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				e.workMu.Lock()
				defer e.workMu.Unlock()
				// Once the elector's Run has returned or shutdown began, lctx
				// or ctx has ended: a late goroutine never starts the work.
				if lctx.Err() != nil || ctx.Err() != nil {
					return
				}
				res = e.lead(ctx, lctx, lock, work)
				// The work has returned: now the lease may be released.
				stopElect()
			},
			OnStoppedLeading: func() {}, // lead logs and resets the state
			OnNewLeader: func(id string) {
				if id != e.cfg.Identity {
					e.log.Info().Str("leader", id).Msg("following")
				}
			},
		},
	})
	if err != nil {
		return termResult{}, fmt.Errorf("leader election: %w", err)
	}
	// Run returns when electCtx ends or the lease is lost; it cancels lctx
	// but does not wait for the work, so wait here: nothing may act after
	// term returns.
	le.Run(electCtx)
	e.workMu.Lock()
	defer e.workMu.Unlock()
	return res, nil
}

// lead runs one term's work. Its context ends at shutdown, when client-go
// ends lctx, or when the lease has gone renewDeadline without a renewal.
func (e *Elector) lead(ctx, lctx context.Context, lock *renewLock, work func(ctx context.Context) error) termResult {
	wctx, cancel := context.WithCancelCause(lctx)
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(errShutdown) })
	defer stop()
	go e.watchdog(wctx, lock, cancel)

	term := e.terms.Add(1)
	e.log.Info().Str("lease", e.cfg.Namespace+"/"+e.cfg.Name).Int64("term", term).Msg("became leader")
	e.set(true)
	start := time.Now()
	err := work(wctx)
	led := time.Since(start)
	e.set(false)
	if wctx.Err() == nil {
		// The work ended by itself while it led.
		return termResult{ended: true, err: err, led: led}
	}
	cause := context.Cause(wctx)
	if errors.Is(cause, context.Canceled) {
		cause = ErrLostLeadership // client-go ended lctx: the lease is lost
	}
	e.log.Info().Int64("term", term).AnErr("why", cause).Dur("led", led).Msg("stopped leading")
	return termResult{err: err, led: led}
}

// watchdog cancels the term when the lease has gone renewDeadline without a
// renewal. client-go gives up only a retryPeriod later and then tries to
// release the lease (up to renewDeadline more) before ending lctx; another
// replica may take the lease leaseDuration after the last renewal it saw.
func (e *Elector) watchdog(ctx context.Context, lock *renewLock, cancel context.CancelCauseFunc) {
	for {
		left := time.Until(lock.renewed().Add(e.cfg.RenewDeadline))
		if left <= 0 {
			e.log.Warn().Dur("renewDeadline", e.cfg.RenewDeadline).Msg("lease not renewed in time; stopping work")
			cancel(ErrLostLeadership)
			return
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// renewLock records when the lease was last written with this replica as its
// holder (the time the write was sent, so the lease is valid at least until
// then plus its duration), on the monotonic clock: a step of the wall clock
// must not move the watchdog's deadline. It tells observe the outcome of
// every access to the Lease.
type renewLock struct {
	resourcelock.Interface
	base    time.Time    // carries a monotonic reading; last is measured from it
	last    atomic.Int64 // nanoseconds from base to the last renewal sent
	observe func(error)
}

func newRenewLock(l resourcelock.Interface, observe func(error)) *renewLock {
	return &renewLock{Interface: l, base: time.Now(), observe: observe}
}

func (l *renewLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if apierrors.IsNotFound(err) {
		l.observe(nil) // no Lease yet: the elector creates it
	} else {
		l.observe(err)
	}
	return rec, raw, err
}

func (l *renewLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Create(ctx, ler) })
}

func (l *renewLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ler, func() error { return l.Interface.Update(ctx, ler) })
}

func (l *renewLock) write(ler resourcelock.LeaderElectionRecord, do func() error) error {
	sent := time.Since(l.base)
	err := do()
	if err == nil && ler.HolderIdentity == l.Identity() {
		l.last.Store(int64(sent))
	}
	l.observe(err)
	return err
}

func (l *renewLock) renewed() time.Time { return l.base.Add(time.Duration(l.last.Load())) }

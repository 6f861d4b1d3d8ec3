// Package leader runs an actor's work only while it holds a Lease, using
// client-go's leaderelection. The lease is released on shutdown so a standby
// takes over at once, and losing it cancels the work immediately: an actor
// that is no longer sure it leads must not write to the cluster.
package leader

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// ErrLostLeadership is returned when the lease was lost before shutdown.
var ErrLostLeadership = errors.New("lost leadership")

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
	// OnChange, when set, is told of every leadership change (for metrics).
	OnChange func(leading bool)
}

// New builds an elector.
func New(client kubernetes.Interface, cfg Config, log zerolog.Logger) *Elector {
	return &Elector{cfg: cfg, client: client, log: log}
}

// IsLeader reports whether this replica currently holds the lease.
func (e *Elector) IsLeader() bool { return e.leading.Load() }

func (e *Elector) set(v bool) {
	e.leading.Store(v)
	if e.OnChange != nil {
		e.OnChange(v)
	}
}

// Run blocks until ctx ends or leadership is lost. work runs with a context
// that is cancelled the moment leadership ends; Run returns after work returns.
// It returns nil on shutdown and ErrLostLeadership (or work's error) otherwise.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context) error) error {
	if !e.cfg.Enabled {
		e.log.Warn().Msg("leader election disabled: acting as the only replica")
		e.set(true)
		defer e.set(false)
		err := work(ctx)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metaFor(e.cfg),
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}
	var (
		workErr  error
		started  atomic.Bool
		workDone = make(chan struct{})
	)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            e.cfg.Name,
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				defer close(workDone)
				if lctx.Err() != nil {
					return // acquired and lost before this goroutine ran
				}
				started.Store(true)
				e.log.Info().Str("lease", e.cfg.Namespace+"/"+e.cfg.Name).Msg("became leader")
				e.set(true)
				workErr = work(lctx)
			},
			OnStoppedLeading: func() {
				e.set(false)
				e.log.Info().Msg("stopped leading")
			},
			OnNewLeader: func(id string) {
				if id != e.cfg.Identity {
					e.log.Info().Str("leader", id).Msg("following")
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// Run returns when ctx ends or the lease is lost; it cancels the work's
	// context but does not wait for it, so wait here: nothing may act after
	// this returns.
	le.Run(ctx)
	if started.Load() {
		<-workDone
		if workErr != nil && ctx.Err() == nil {
			return workErr
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return ErrLostLeadership
}

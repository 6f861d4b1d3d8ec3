// Package lease makes one notifier replica the active one, with a lease kept
// in a JetStream KV bucket (the notifier has no Kubernetes access, so the
// actors' coordination.k8s.io Lease is not available to it).
//
// Only the active replica consumes, groups, rate-limits and sends: Feishu's
// limits (5/s, 100/min per bot) are per bot, not per process, and a burst
// split over two processes becomes two partial cards. The others wait as
// standbys and take over when the lease ends: at once when the active
// replica shuts down cleanly (it deletes the key after finishing its
// in-flight request), after the lease duration when it dies.
//
// The bucket's MaxAge is the lease duration and it keeps one revision per
// key, so the lease key disappears by itself unless its holder rewrites it.
// Acquiring is kv.Create (fails while the key exists), renewing is kv.Update
// on the revision the holder wrote last (fails if anyone else wrote it), so
// two holders are impossible as far as the server is concerned. A holder
// that cannot renew within RenewDeadline stops leading before the key can
// expire (RenewDeadline < Duration, measured from before the request was
// sent), so its successor never overlaps with it by its own clock.
package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Bucket is the KV bucket of the notifier's lease.
const Bucket = "opswire-notifier-lease"

// EnsureBucket creates or updates the lease bucket; its TTL is the lease
// duration.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, duration time.Duration, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "opswire notifier: which replica is active",
		TTL: duration, History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Lease is one replica's side of the lease.
type Lease struct {
	KV  jetstream.KeyValue
	Key string // one key per cluster
	ID  string // this replica, written as the value
	// Duration is the bucket's TTL; RenewDeadline (< Duration) is how long
	// the holder keeps leading without a successful renewal; RetryPeriod is
	// the renew and acquire interval.
	Duration, RenewDeadline, RetryPeriod time.Duration
	Log                                  zerolog.Logger
	// OnChange is told when this replica becomes active or stops being.
	OnChange func(active bool)
}

// Run campaigns until ctx ends. Each time it holds the lease it runs lead
// with a context that ends when the lease is lost or ctx ends, keeps
// renewing until lead has returned (so the in-flight work a shutdown lets
// finish is still covered), and then deletes the key. An error from lead
// ends Run with that error.
func (l *Lease) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	for {
		rev, err := l.acquire(ctx)
		if err != nil {
			return nil // ctx ended while waiting
		}
		l.Log.Info().Str("lease", l.Key).Msg("active: this replica delivers notifications")
		l.change(true)
		err = l.hold(ctx, rev, lead)
		l.change(false)
		if err != nil || ctx.Err() != nil {
			return err
		}
		l.Log.Warn().Str("lease", l.Key).Msg("lease lost; standing by")
	}
}

func (l *Lease) change(active bool) {
	if l.OnChange != nil {
		l.OnChange(active)
	}
}

// acquire waits until this replica creates the key.
func (l *Lease) acquire(ctx context.Context) (uint64, error) {
	logged := false
	for {
		rctx, cancel := context.WithTimeout(ctx, l.RetryPeriod)
		rev, err := l.KV.Create(rctx, l.Key, []byte(l.ID))
		cancel()
		if err == nil {
			return rev, nil
		}
		if !logged && errors.Is(err, jetstream.ErrKeyExists) {
			holder := "?"
			if e, gerr := l.KV.Get(ctx, l.Key); gerr == nil {
				holder = string(e.Value())
			}
			l.Log.Info().Str("lease", l.Key).Str("holder", holder).Msg("standing by: another replica is active")
			logged = true
		} else if !errors.Is(err, jetstream.ErrKeyExists) && ctx.Err() == nil {
			l.Log.Warn().Err(err).Str("lease", l.Key).Msg("cannot acquire the lease; retrying")
		}
		if err := sleep(ctx, l.RetryPeriod); err != nil {
			return 0, err
		}
	}
}

// hold runs lead while renewing the lease, then releases it.
func (l *Lease) hold(ctx context.Context, rev uint64, lead func(ctx context.Context) error) error {
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- lead(lctx) }()
	lastRenew := time.Now()
	t := time.NewTicker(l.RetryPeriod)
	defer t.Stop()
	lost := false
	for {
		select {
		case err := <-done:
			if !lost {
				l.release(rev)
			}
			return err
		case <-t.C:
			if lost {
				continue
			}
			sent := time.Now()
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.RetryPeriod)
			next, err := l.KV.Update(rctx, l.Key, []byte(l.ID), rev)
			cancel()
			if err == nil {
				rev, lastRenew = next, sent
				continue
			}
			taken := errors.Is(err, jetstream.ErrKeyRevisionMismatch)
			if taken {
				// An earlier renewal whose answer came too late (after
				// RetryPeriod) may have been stored all the same: the key
				// then holds this replica's id at a newer revision, and
				// only its holder writes its id. Renew on that revision;
				// lastRenew stays the last confirmed one (the late write
				// was sent after it), so the deadline is not stretched.
				if newer, ok := l.ownRevision(ctx); ok {
					rev, taken = newer, false
				}
			}
			if taken || time.Since(lastRenew) >= l.RenewDeadline {
				l.Log.Error().Err(err).Str("lease", l.Key).Msg("cannot renew the lease; stopping delivery")
				lost = true
				stop()
			}
		}
	}
}

// ownRevision reads the lease key: its revision if it holds this replica's id.
func (l *Lease) ownRevision(ctx context.Context) (uint64, bool) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.RetryPeriod)
	defer cancel()
	e, err := l.KV.Get(rctx, l.Key)
	if err != nil || string(e.Value()) != l.ID {
		return 0, false
	}
	return e.Revision(), true
}

// release deletes the key (only if it is still ours), so a standby takes
// over at once instead of after the lease duration.
func (l *Lease) release(rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.KV.Delete(ctx, l.Key, jetstream.LastRevision(rev)); err != nil {
		l.Log.Warn().Err(err).Str("lease", l.Key).Msg("cannot release the lease; a standby takes over when it expires")
		return
	}
	l.Log.Info().Str("lease", l.Key).Msg("lease released")
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

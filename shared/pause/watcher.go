package pause

import (
	"context"
	"errors"
	"fmt"
	"github.com/opswire/opswire/shared/config"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Source is the part of a KV bucket a Watcher reads.
type Source interface {
	Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// Watcher keeps one actor's view of its cluster's pause records, fed by a
// KV watch (updates arrive within milliseconds of the put). Every replica
// runs one, standbys too, so a new leader knows at once.
type Watcher struct {
	src     Source
	cluster string
	actor   string
	now     func() time.Time
	log     zerolog.Logger
	retry   time.Duration

	mu      sync.Mutex
	recs    map[string]Record // by actor (the actor's own and All)
	synced  chan struct{}
	didSync bool
}

// WatcherConfig holds a Watcher's settings.
type WatcherConfig struct {
	Cluster, Actor string
	// Registry gets opswire_paused{actor}; nil: no metric.
	Registry prometheus.Registerer
	Now      func() time.Time // time.Now when nil
	// Retry is the wait before a failed watch is started again (1 s when 0).
	Retry time.Duration
}

// NewWatcher builds a watcher of cfg.Actor's pause in cfg.Cluster.
func NewWatcher(src Source, cfg WatcherConfig, log zerolog.Logger) *Watcher {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	w := &Watcher{src: src, cluster: cfg.Cluster, actor: cfg.Actor, now: cfg.Now, log: log, retry: cfg.Retry,
		recs: map[string]Record{}, synced: make(chan struct{})}
	if cfg.Registry != nil {
		// Judged at scrape time, so the gauge drops at Until without a timer.
		cfg.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "opswire_paused", Help: "1 while a pause record (opswire pause) holds this actor, else 0.",
			ConstLabels: prometheus.Labels{"actor": cfg.Actor},
		}, func() float64 {
			if _, ok := w.Paused(); ok {
				return 1
			}
			return 0
		}))
	}
	return w
}

// Paused returns the pause that holds the actor now (its own or All's; of
// two, the one that lasts longer), judged by the clock: an expired record
// holds nothing.
func (w *Watcher) Paused() (Record, bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var best Record
	found := false
	for _, a := range []string{w.actor, All} {
		r, ok := w.recs[a]
		if !ok || !r.Active(now) {
			continue
		}
		if !found || lasts(r, best) {
			best, found = r, true
		}
	}
	return best, found
}

// lasts reports whether a ends after b.
func lasts(a, b Record) bool {
	if b.Until.IsZero() {
		return false
	}
	return a.Until.IsZero() || a.Until.After(b.Until)
}

// Synced is closed once the records stored when the watch started are loaded.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// WaitSynced waits until the records are loaded or ctx ends.
func (w *Watcher) WaitSynced(ctx context.Context) error {
	select {
	case <-w.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run watches the records until ctx ends, starting the watch again after a
// failure (NATS away, a lost consumer): the records loaded so far stay.
func (w *Watcher) Run(ctx context.Context) error {
	for {
		err := w.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		w.log.Warn().Err(err).Str("bucket", Bucket).Dur("retryIn", w.retry).Msg("pause watch ended; starting it again")
		t := time.NewTimer(w.retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (w *Watcher) watch(ctx context.Context) error {
	kw, err := w.src.Watch(ctx, config.ClusterKey(w.cluster)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = kw.Stop() }()
	fresh := map[string]Record{} // the initial values replace what an earlier watch loaded
	initial := true
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e == nil { // the initial values are all in
				w.mu.Lock()
				w.recs, initial = fresh, false
				if !w.didSync {
					w.didSync = true
					close(w.synced)
				}
				w.mu.Unlock()
				continue
			}
			w.apply(e, fresh, initial)
		}
	}
}

// apply records one entry: into fresh while the initial values come in,
// else into the live set.
func (w *Watcher) apply(e jetstream.KeyValueEntry, fresh map[string]Record, initial bool) {
	actor := e.Key()[len(config.ClusterKey(w.cluster))+1:]
	if actor != w.actor && actor != All {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	recs := w.recs
	if initial {
		recs = fresh
	}
	if e.Operation() != jetstream.KeyValuePut {
		if _, had := recs[actor]; had && !initial {
			w.log.Info().Str("pause", actor).Msg("pause record removed: resumed")
		}
		delete(recs, actor)
		return
	}
	r, err := decode(e.Value())
	if err != nil {
		w.log.Error().Err(err).Str("key", e.Key()).Msg("pause record cannot be decoded: ignored")
		return
	}
	recs[actor] = r
	w.log.Warn().Str("pause", actor).Str("by", r.By).Time("until", r.Until).Str("reason", r.Reason).
		Bool("active", r.Active(w.now())).Msg("pause record")
}

// Follow creates the bucket if missing (replicas: nats.replicas), starts a
// Watcher in the background until ctx ends and returns it once the stored
// records are loaded: a replica never leads without knowing its pause.
func Follow(ctx context.Context, js jetstream.KeyValueManager, replicas int, cfg WatcherConfig, log zerolog.Logger) (*Watcher, error) {
	kv, err := EnsureBucket(ctx, js, replicas)
	if err != nil {
		return nil, err
	}
	w := NewWatcher(kv, cfg, log)
	go func() { _ = w.Run(ctx) }()
	if err := w.WaitSynced(ctx); err != nil {
		return nil, fmt.Errorf("load pause records from %s: %w", Bucket, err)
	}
	return w, nil
}

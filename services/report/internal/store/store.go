// Package store keeps the report actor's memory in a NATS KV bucket, so that
// a restart or a new leader continues where the last one stopped: the tick of
// the last scheduled report (for catch-up), the restart baseline of increase
// mode, and what was last alerted per node (so a restart does not re-alert).
//
// Keys are prefixed with the cluster, because several clusters may share one
// NATS system and one bucket. <cluster> is config.ClusterKey of the name:
// KV keys allow fewer characters than cluster.name does (eu:prod is
// eu=3Aprod):
//
//	<cluster>.tick.last              RFC 3339 time of the last scheduled report sent
//	<cluster>.baseline.time          RFC 3339 time the baseline was taken
//	<cluster>.baseline.pod.<uid>     {"<container>": restarts, ...}
//	<cluster>.images.<node uid>      images.Memory as JSON (with the node's name)
//	<cluster>.reports.sizes          sizes in bytes of the restart reports stored in OPS, oldest first
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/report/internal/images"
	"github.com/opswire/opswire/services/report/internal/restarts"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/subject"
)

// Bucket is the KV bucket of the report actor.
const Bucket = "opswire_report"

// markerTTL is how long a purge marker stays in the bucket. A purge leaves
// a marker per key (one per pod UID that ever restarted, per node that
// ever alerted), and every leader's load reads every marker under its
// prefix: without a TTL they pile up for ever. Nothing here needs a marker
// for long: only a load running at the moment of the purge reads it.
var markerTTL = time.Hour

// Open creates the bucket if needed (idempotent, so replicas may race).
// LimitMarkerTTL lets purges give their markers a TTL (it turns on the
// stream's per-message TTLs, which nats-server never turns off again).
func Open(ctx context.Context, js jetstream.KeyValueManager, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:         Bucket,
		Description:    "opswire report actor: last tick, increase-mode baseline, image alert memory",
		History:        1,
		Storage:        jetstream.FileStorage,
		Replicas:       replicas,
		LimitMarkerTTL: markerTTL,
	})
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Store reads and writes one cluster's keys.
type Store struct {
	kv     jetstream.KeyValue
	prefix string
}

// New wraps a bucket for one cluster.
func New(kv jetstream.KeyValue, cluster string) *Store {
	return &Store{kv: kv, prefix: config.ClusterKey(cluster) + "."}
}

func (s *Store) key(parts ...string) string { return s.prefix + strings.Join(parts, ".") }

// ErrMalformed marks a value that does not decode: no retry can fix it, so
// callers treat it as absent (a bad baseline time is no baseline) instead of
// failing the leader on every replica.
var ErrMalformed = errors.New("malformed value")

// getTime reads a time key; ok is false when it was never written.
func (s *Store) getTime(ctx context.Context, key string) (time.Time, bool, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("KV get %s: %w", key, err)
	}
	t, err := time.Parse(time.RFC3339Nano, string(e.Value()))
	if err != nil {
		return time.Time{}, false, fmt.Errorf("KV %s: %w: not a time: %w", key, ErrMalformed, err)
	}
	return t, true, nil
}

func (s *Store) putTime(ctx context.Context, key string, t time.Time) error {
	if _, err := s.kv.Put(ctx, key, []byte(t.UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("KV put %s: %w", key, err)
	}
	return nil
}

// LastTick returns the tick of the last scheduled report sent.
func (s *Store) LastTick(ctx context.Context) (time.Time, bool, error) {
	return s.getTime(ctx, s.key("tick", "last"))
}

// SetLastTick records that the report of tick was sent.
func (s *Store) SetLastTick(ctx context.Context, tick time.Time) error {
	return s.putTime(ctx, s.key("tick", "last"), tick)
}

// purge removes a key, leaving a marker that expires after markerTTL.
func (s *Store) purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	return s.kv.Purge(ctx, key, append(opts, jetstream.PurgeTTL(markerTTL))...)
}

// each calls fn with every live entry under the filter. Markers it meets
// that have outlived their TTL twice over have none (a build before
// markerTTL left them, or a purge made while the bucket had no TTLs): they
// are purged again, with a TTL, if nothing was written to the key since.
func (s *Store) each(ctx context.Context, filter string, fn func(jetstream.KeyValueEntry) error) error {
	w, err := s.kv.Watch(ctx, filter)
	if err != nil {
		return fmt.Errorf("KV watch %s: %w", filter, err)
	}
	defer func() { _ = w.Stop() }()
	var stale []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("KV watch closed")
			}
			if e == nil { // all current values delivered
				for _, m := range stale {
					err := s.purge(ctx, m.Key(), jetstream.LastRevision(m.Revision()))
					if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
						return fmt.Errorf("KV purge old marker %s: %w", m.Key(), err)
					}
				}
				return nil
			}
			if e.Operation() != jetstream.KeyValuePut {
				if time.Since(e.Created()) > 2*markerTTL {
					stale = append(stale, e)
				}
				continue
			}
			if err := fn(e); err != nil {
				return err
			}
		}
	}
}

// LoadBaseline returns the increase-mode baseline, nil when none was saved.
// An undecodable baseline time is an error wrapping ErrMalformed.
func (s *Store) LoadBaseline(ctx context.Context) (*restarts.Baseline, error) {
	at, ok, err := s.getTime(ctx, s.key("baseline", "time"))
	if err != nil || !ok {
		return nil, err
	}
	b := &restarts.Baseline{Time: at, Pods: map[string]map[string]int32{}}
	podPrefix := s.key("baseline", "pod") + "."
	err = s.each(ctx, podPrefix+"*", func(e jetstream.KeyValueEntry) error {
		var m map[string]int32
		if err := json.Unmarshal(e.Value(), &m); err != nil {
			// One bad entry must not stop the report: that pod counts from zero.
			return nil
		}
		b.Pods[strings.TrimPrefix(e.Key(), podPrefix)] = m
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// SaveBaseline stores next, writing only what differs from old (what was
// loaded or last saved). The time key is written last: a baseline saved
// half-way keeps the old time, and the counts it did write are only more recent.
func (s *Store) SaveBaseline(ctx context.Context, next, old *restarts.Baseline) error {
	put, remove := next.Diff(old)
	for uid, m := range put {
		data, _ := json.Marshal(m)
		if _, err := s.kv.Put(ctx, s.key("baseline", "pod", uid), data); err != nil {
			return fmt.Errorf("KV put baseline of pod %s: %w", uid, err)
		}
	}
	for _, uid := range remove {
		if err := s.purge(ctx, s.key("baseline", "pod", uid)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("KV purge baseline of pod %s: %w", uid, err)
		}
	}
	return s.putTime(ctx, s.key("baseline", "time"), next.Time)
}

// LoadImageMemory returns what was last alerted, by node UID. Entries
// written before the memory was keyed by UID (keyed by name, without a uid
// field) are purged: at worst such a node alerts once more.
func (s *Store) LoadImageMemory(ctx context.Context) (map[string]images.Memory, error) {
	out := map[string]images.Memory{}
	prefix := s.key("images") + "."
	var stale []string
	err := s.each(ctx, prefix+"*", func(e jetstream.KeyValueEntry) error {
		var m images.Memory
		key := strings.TrimPrefix(e.Key(), prefix)
		if err := json.Unmarshal(e.Value(), &m); err != nil || m.UID == "" || subject.Encode(m.UID) != key || m.Node == "" {
			stale = append(stale, key) // forget a bad entry: worst case one early re-alert
			return nil
		}
		out[m.UID] = m
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, key := range stale {
		if err := s.purge(ctx, prefix+key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("KV purge stale image memory %s: %w", key, err)
		}
	}
	return out, nil
}

// SaveImageMemory stores the memory of the node uid.
func (s *Store) SaveImageMemory(ctx context.Context, uid string, m images.Memory) error {
	data, _ := json.Marshal(m)
	if _, err := s.kv.Put(ctx, s.key("images", subject.Encode(uid)), data); err != nil {
		return fmt.Errorf("KV put image memory of node %s (%s): %w", m.Node, uid, err)
	}
	return nil
}

// DeleteImageMemory forgets the node uid (deleted or replaced).
func (s *Store) DeleteImageMemory(ctx context.Context, uid string) error {
	err := s.purge(ctx, s.key("images", subject.Encode(uid)))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("KV purge image memory of node %s: %w", uid, err)
	}
	return nil
}

// maxSizes bounds the report-size ledger (about 8 bytes per entry).
const maxSizes = 20000

// LoadReportSizes returns the sizes of the restart reports stored in OPS,
// oldest first, as recorded by SaveReportSizes (nil when never saved).
func (s *Store) LoadReportSizes(ctx context.Context) ([]int, error) {
	e, err := s.kv.Get(ctx, s.key("reports", "sizes"))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("KV get report sizes: %w", err)
	}
	var sizes []int
	if err := json.Unmarshal(e.Value(), &sizes); err != nil {
		return nil, nil // unknown sizes count as the maximum: safe
	}
	return sizes, nil
}

// SaveReportSizes records the sizes, keeping the newest maxSizes.
func (s *Store) SaveReportSizes(ctx context.Context, sizes []int) error {
	if len(sizes) > maxSizes {
		sizes = sizes[len(sizes)-maxSizes:]
	}
	data, _ := json.Marshal(sizes)
	if _, err := s.kv.Put(ctx, s.key("reports", "sizes"), data); err != nil {
		return fmt.Errorf("KV put report sizes: %w", err)
	}
	return nil
}

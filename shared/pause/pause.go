// Package pause holds the pause records people set with `opswire pause`: one
// KV record per cluster and actor (or "all") in the bucket opswire-pause. A
// leader asks its Watcher before each write; the record lives in NATS, not in
// the leader, so a pause outlives failover, and it ends by itself at Until,
// judged by the clock on every read.
package pause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/opswire/opswire/shared/config"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the KV bucket of the pause records.
const Bucket = "opswire-pause"

// All is the actor name of a record that pauses every actor of a cluster.
const All = "all"

// Actors are the actors a pause applies to (the watcher never writes to the
// cluster, so it has nothing to pause).
var Actors = []string{"cordon", "cleanup", "report", "notifier"}

// Reason is the decision code and reason actors publish for what they did
// not do while paused.
const Reason = "paused"

// Record is one pause. Until zero means until resumed.
type Record struct {
	Until  time.Time `json:"until,omitzero"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	Since  time.Time `json:"since"`
}

// Active reports whether the pause holds at now.
func (r Record) Active(now time.Time) bool { return r.Until.IsZero() || now.Before(r.Until) }

// String says who paused, why and until when, for logs and audit reasons.
func (r Record) String() string {
	s := "paused"
	if r.By != "" {
		s += " by " + r.By
	}
	if r.Until.IsZero() {
		s += " until resumed"
	} else {
		s += " until " + r.Until.UTC().Format(time.RFC3339)
	}
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// ValidActor reports whether actor can be paused (an actor of Actors or All).
func ValidActor(actor string) bool { return actor == All || slices.Contains(Actors, actor) }

// Key is the record's key: <cluster>.<actor>, the cluster name written as
// config.ClusterKey (a subject token may hold what a KV key refuses: eu:prod,
// a Chinese name).
func Key(cluster, actor string) string { return config.ClusterKey(cluster) + "." + actor }

// Replicas of the bucket: the services create it like their other buckets.
func EnsureBucket(ctx context.Context, js jetstream.KeyValueManager, replicas int) (jetstream.KeyValue, error) {
	if replicas < 1 {
		replicas = 1
	}
	// No bucket TTL and no per-message TTL: nats.go v1.55 sets a message
	// TTL only on Create, not on Put, and an expired record must stay
	// readable for `opswire status`. Expiry is judged by Until on read.
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: Bucket, Description: "opswire: pause records per cluster and actor (opswire pause)",
		History: 10, Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", Bucket, err)
	}
	return kv, nil
}

// Store reads and writes the records of one cluster (the opswire command).
type Store struct {
	KV      jetstream.KeyValue
	Cluster string
}

// Pause writes the record of actor.
func (s Store) Pause(ctx context.Context, actor string, r Record) error {
	if !ValidActor(actor) {
		return fmt.Errorf("actor %q: want one of %s or %s", actor, strings.Join(Actors, ", "), All)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.KV.Put(ctx, Key(s.Cluster, actor), b); err != nil {
		return fmt.Errorf("write pause record %s: %w", Key(s.Cluster, actor), err)
	}
	return nil
}

// Resume deletes the record of actor (a delete marker, which watchers see).
func (s Store) Resume(ctx context.Context, actor string) error {
	if !ValidActor(actor) {
		return fmt.Errorf("actor %q: want one of %s or %s", actor, strings.Join(Actors, ", "), All)
	}
	if err := s.KV.Delete(ctx, Key(s.Cluster, actor)); err != nil {
		return fmt.Errorf("delete pause record %s: %w", Key(s.Cluster, actor), err)
	}
	return nil
}

// Get reads the record of actor; ok is false when there is none.
func (s Store) Get(ctx context.Context, actor string) (Record, bool, error) {
	e, err := s.KV.Get(ctx, Key(s.Cluster, actor))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read pause record %s: %w", Key(s.Cluster, actor), err)
	}
	r, err := decode(e.Value())
	if err != nil {
		return Record{}, false, fmt.Errorf("pause record %s: %w", Key(s.Cluster, actor), err)
	}
	return r, true, nil
}

func decode(b []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(b, &r)
	return r, err
}

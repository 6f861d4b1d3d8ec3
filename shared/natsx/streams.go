package natsx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/subject"
)

// KubeStreamConfig is the compacted cluster-state mirror: the last state of
// every object, tombstones expiring through per-message TTLs.
func KubeStreamConfig(c config.NATS) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              subject.KubeStream,
		Description:       "opswire: last known state of every pod and node",
		Subjects:          []string{"kube.>"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		MaxMsgsPerSubject: 1,
		Discard:           jetstream.DiscardOld,
		AllowMsgTTL:       true,
		AllowDirect:       true,
		Duplicates:        c.Duplicates.Duration,
		Replicas:          c.Replicas,
	}
}

// OpsStreamConfig is the audit log of every decision and action. On a fleet
// hub (nats.opsSources set) it stores no subject of its own: it sources each
// cluster's ops.<cluster>.> from that cluster's OPS (OpsSource), and has no
// Nats-Msg-Id deduplication (duplicate window 0, which the server keeps
// only for a stream with sources): the hub takes each source's messages by
// sequence and resumes after the last one it holds, so it never needs ids to
// drop a repeat, and one window shared by every source would let a cluster
// drop another's messages by publishing their (predictable) ids first
// (docs/fleet.md#trust). Each edge's OPS deduplicates its publishers' retries.
func OpsStreamConfig(c config.NATS) jetstream.StreamConfig {
	subjects := []string{"ops.>"}
	duplicates := c.Duplicates.Duration
	var sources []*jetstream.StreamSource
	for _, cluster := range c.OpsSources {
		subjects, duplicates = nil, 0
		sources = append(sources, OpsSource(cluster))
	}
	return jetstream.StreamConfig{
		Name:        subject.OpsStream,
		Description: "opswire: audit log of every decision and action",
		Subjects:    subjects,
		Sources:     sources,
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      c.OpsMaxAge.Duration,
		MaxBytes:    c.OpsMaxBytes,
		Discard:     jetstream.DiscardOld,
		AllowDirect: true,
		Duplicates:  duplicates,
		Replicas:    c.Replicas,
	}
}

// OpsSource is one cluster's feed of a fleet hub's OPS: the OPS stream of
// the cluster's JetStream domain (an edge server whose jetstream.domain is
// the cluster name, connected to the hub as a leaf node), reached through its
// API prefix $JS.<cluster>.API, filtered to ops.<cluster>.> so that a
// cluster can only ever feed its own subjects, and delivered on
// fleet.<cluster>.> so that the hub's leaf user of a cluster needs to
// publish only there. The hub records the last sequence it holds of every
// source and resumes from it after the link was down.
func OpsSource(cluster string) *jetstream.StreamSource {
	token := subject.Encode(cluster)
	return &jetstream.StreamSource{
		Name:          subject.OpsStream,
		FilterSubject: "ops." + token + ".>",
		External:      &jetstream.ExternalStream{APIPrefix: "$JS." + cluster + ".API", DeliverPrefix: "fleet." + token},
	}
}

// StreamNames are the streams a server of this configuration holds: KUBE
// and OPS, or OPS alone on a fleet hub (no cluster state there).
func StreamNames(c config.NATS) []string {
	if len(c.OpsSources) > 0 {
		return []string{subject.OpsStream}
	}
	return []string{subject.KubeStream, subject.OpsStream}
}

// EnsureStreams creates or updates the KUBE and OPS streams (OPS alone on a
// fleet hub). It is idempotent, so every service may call it at start and
// none depends on start order.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, c config.NATS) error {
	streams := []jetstream.StreamConfig{KubeStreamConfig(c), OpsStreamConfig(c)}
	if len(c.OpsSources) > 0 {
		streams = streams[1:]
	}
	for _, sc := range streams {
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = js.CreateOrUpdateStream(actx, sc)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		case <-time.After(time.Duration(attempt+1) * 500 * time.Millisecond):
		}
	}
	return fmt.Errorf("stream %s: %w", sc.Name, err)
}

// WaitStreams waits until the KUBE and OPS streams exist, for a service that
// does not manage them (--manage-streams=false): its NATS user then needs only
// STREAM.INFO on them, and the watcher, which creates them, is the only one
// that may change them. Progress is logged every logEvery while waiting.
func WaitStreams(ctx context.Context, js jetstream.JetStream, log zerolog.Logger, logEvery time.Duration) error {
	for _, name := range []string{subject.KubeStream, subject.OpsStream} {
		if err := waitStream(ctx, js, name, log, logEvery,
			"waiting for the stream; it is created by a service started with --manage-streams (the watcher)"); err != nil {
			return err
		}
	}
	return nil
}

// WaitForStreams waits until every named stream exists, for a service that
// reads streams it never creates (a fleet notifier on a hub reads the
// fleet-wide stream the deployment defines). Progress is logged every
// logEvery while waiting.
func WaitForStreams(ctx context.Context, js jetstream.JetStream, log zerolog.Logger, logEvery time.Duration, names ...string) error {
	for _, name := range names {
		if err := waitStream(ctx, js, name, log, logEvery,
			"waiting for the stream; this service does not create it (it is the deployment's)"); err != nil {
			return err
		}
	}
	return nil
}

func waitStream(ctx context.Context, js jetstream.JetStream, name string, log zerolog.Logger, logEvery time.Duration, waiting string) error {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 5 * time.Second, Steps: math.MaxInt32}
	var lastLog time.Time
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := js.Stream(actx, name)
		cancel()
		if err == nil {
			return nil
		}
		if time.Since(lastLog) >= logEvery {
			lastLog = time.Now()
			ev := log.Warn().Str("stream", name)
			if !errors.Is(err, jetstream.ErrStreamNotFound) {
				ev = ev.Err(err)
			}
			ev.Msg(waiting)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stream %s: %w", name, ctx.Err())
		case <-time.After(backoff.Step()):
		}
	}
}

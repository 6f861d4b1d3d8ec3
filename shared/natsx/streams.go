package natsx

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// OpsStreamConfig is the audit log of every decision and action.
func OpsStreamConfig(c config.NATS) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        subject.OpsStream,
		Description: "opswire: audit log of every decision and action",
		Subjects:    []string{"ops.>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      c.OpsMaxAge.Duration,
		MaxBytes:    c.OpsMaxBytes,
		Discard:     jetstream.DiscardOld,
		AllowDirect: true,
		Duplicates:  c.Duplicates.Duration,
		Replicas:    c.Replicas,
	}
}

// EnsureStreams creates or updates the KUBE and OPS streams. It is idempotent,
// so every service may call it at start and none depends on start order.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, c config.NATS) error {
	for _, sc := range []jetstream.StreamConfig{KubeStreamConfig(c), OpsStreamConfig(c)} {
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

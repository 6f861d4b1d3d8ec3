// Package service wires the notifier together: it resolves receiver
// credentials, creates the dead-letter stream, the delivered-id bucket and
// the durable consumer, and runs the dispatcher until shutdown. The notifier
// is not leader-elected: every replica pulls from the same durable consumer,
// so JetStream spreads messages over replicas and redelivers a dead
// replica's messages to the others.
package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/feishu"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/route"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/subject"
)

// RateMargin widens every rate window: the receiver counts arrival times,
// which jitter with the network.
const RateMargin = 150 * time.Millisecond

// Run is the notifier's main loop.
func Run(ctx context.Context, rt *app.Runtime) error {
	cfg := rt.Config
	n := cfg.Notifier
	receivers, err := BuildReceivers(cfg.NotifierReceivers(), n, &http.Client{}, &ratelimit.Registry{})
	if err != nil {
		return err
	}
	if len(receivers) == 0 {
		rt.Log.Warn().Msg("no receivers configured (notifier.receivers, sendReport.apiurl, delException.apiurl); OPS messages are acknowledged and dropped")
	}
	for _, r := range receivers {
		rt.Log.Info().Str("receiver", r.Name).Msg("receiver ready")
	}
	nc, js, err := rt.NATS(ctx)
	if err != nil {
		return err
	}
	if err := dispatch.EnsureDeadLetterStream(ctx, js, n.DeadLetterMaxAge.Duration, cfg.NATS.Replicas); err != nil {
		return err
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, n.DeliveredTTL.Duration, cfg.NATS.Replicas)
	if err != nil {
		return err
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, subject.OpsStream, ConsumerConfig(rt.Cluster, n))
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	metrics := dispatch.NewMetrics(rt.Server.Registry)
	d := dispatch.New(dispatch.Settings{
		Cluster: rt.Cluster, RetryInitial: n.RetryInitial.Duration, RetryMax: n.RetryMax.Duration,
		GiveUpAfter: n.GiveUpAfter.Duration, AckWait: n.AckWait.Duration, MaxDeliver: n.MaxDeliver,
	}, dispatch.Deps{
		Routes:    route.New(cfg.NotifierRoutes(), n.DefaultReceivers, n.GroupWait, n.GroupInterval),
		Receivers: receivers, Delivered: &dispatch.KVDelivered{KV: kv}, DeadJS: js, Core: nc,
		Metrics: metrics, Log: rt.Log,
	})
	dctx, dcancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); d.Run(dctx) }()
	cc, err := cons.Consume(func(m jetstream.Msg) { d.Handle(dctx, m) },
		jetstream.PullMaxMessages(500),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			rt.Log.Warn().Err(err).Msg("consumer")
		}))
	if err != nil {
		dcancel()
		<-done
		return fmt.Errorf("consume: %w", err)
	}
	rt.Server.AddReadiness("consumer", func() error {
		select {
		case <-cc.Closed():
			return errors.New("consumer stopped")
		default:
			return nil
		}
	})
	rt.Log.Info().Str("consumer", cons.CachedInfo().Name).Str("filter", cons.CachedInfo().Config.FilterSubject).
		Int("receivers", len(receivers)).Msg("notifier running")
	<-ctx.Done()
	cc.Stop()
	dcancel()
	<-done
	return nil
}

// ConsumerConfig is the durable consumer shared by all replicas of one
// cluster's notifier. Held messages are kept alive with progress acks, so
// AckWait only decides how soon a crashed replica's messages move on;
// BackOff spaces redeliveries of messages that keep coming back.
func ConsumerConfig(cluster string, n config.Notifier) jetstream.ConsumerConfig {
	ack := n.AckWait.Duration
	var backoff []time.Duration
	for i, d := 0, ack; i < n.MaxDeliver-1 && i < 6; i++ {
		backoff = append(backoff, d)
		d = min(2*d, 10*ack) // documented cap: never more than 10× ackWait
	}
	return jetstream.ConsumerConfig{
		Durable:       "opswire-notifier-" + subject.Encode(cluster),
		Description:   "opswire notifier: fan-out of OPS results to receivers",
		FilterSubject: "ops." + subject.Encode(cluster) + ".>",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ack,
		BackOff:       backoff,
		MaxDeliver:    n.MaxDeliver,
		MaxAckPending: n.MaxAckPending,
	}
}

// BuildReceivers resolves every receiver's URL and secret (from the file, a
// file path or an environment variable) and builds its sink. Errors name the
// receiver and the source (file path, variable), never the value.
func BuildReceivers(rs []config.Receiver, n config.Notifier, client *http.Client, limits *ratelimit.Registry) ([]dispatch.Receiver, error) {
	var out []dispatch.Receiver
	var errs []error
	for _, r := range rs {
		u, err := config.ResolveSecret(r.URL, r.URLFile, r.URLEnv)
		if err == nil && !u.IsSet() {
			err = errors.New("URL is empty")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver %s: url: %w", r.Name, err))
			continue
		}
		secret, err := config.ResolveSecret(r.Secret, r.SecretFile, r.SecretEnv)
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver %s: secret: %w", r.Name, err))
			continue
		}
		var sink notify.Sink
		switch r.Type {
		case config.ReceiverWebhook:
			sink, err = webhook.New(u, client)
		default:
			sink, err = feishu.New(feishu.Options{URL: u, Secret: secret, Keyword: r.Keyword, BodyLimit: n.BodyLimit, MaxRows: n.TopRows, Client: client})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("receiver %s: %w", r.Name, err))
			continue
		}
		sum := sha256.Sum256([]byte(u.Value()))
		perSecond, perMinute := r.RatePerSecond, r.RatePerMinute
		lim := limits.Get(hex.EncodeToString(sum[:]), func() *ratelimit.Limiter {
			return ratelimit.New(RateMargin, ratelimit.Window{Limit: perSecond, Period: time.Second},
				ratelimit.Window{Limit: perMinute, Period: time.Minute})
		})
		out = append(out, dispatch.Receiver{Name: r.Name, Sink: sink, Limiter: lim, Timeout: r.Timeout.Duration})
	}
	return out, errors.Join(errs...)
}

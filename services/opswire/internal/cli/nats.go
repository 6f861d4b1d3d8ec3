package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/pause"
)

// connectNATS opens the pause bucket as cfg.User. Replies come on the user's
// own inbox prefix, the only one deploy/'s permissions let it read.
func connectNATS(ctx context.Context, cfg Config) (Records, func(), error) {
	opts := []nats.Option{nats.Name("opswire-cli"), nats.CustomInboxPrefix("_INBOX_" + cfg.User), nats.Timeout(cfg.Timeout)}
	if cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	nc, err := nats.Connect(cfg.NATSURL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS %s as %s: %w", cfg.NATSURL, cfg.User, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	kv, err := js.KeyValue(ctx, pause.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		nc.Close()
		return nil, nil, fmt.Errorf("KV bucket %s not found: the cordon and cleanup services create it when they start", pause.Bucket)
	}
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open KV bucket %s as %s: %w", pause.Bucket, cfg.User, err)
	}
	return pause.Store{KV: kv, Cluster: cfg.Cluster}, nc.Close, nil
}

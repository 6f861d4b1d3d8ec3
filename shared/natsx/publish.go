package natsx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
)

// Publisher is the part of jetstream.JetStream that services publish with.
type Publisher interface {
	PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// PublishEvent stores one event, retrying with the same Nats-Msg-Id until it is
// acknowledged or ctx ends. A timed-out publish may have been stored; retrying
// with the same id lets the server drop the duplicate.
func PublishEvent(ctx context.Context, js Publisher, subj string, ev envelope.Event, attemptTimeout time.Duration, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	backoff := 100 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		ack, err := js.PublishMsg(actx, ev.Msg(subj), opts...)
		cancel()
		if err == nil {
			return ack, nil
		}
		if Permanent(err) {
			return nil, fmt.Errorf("publish %s: %w", subj, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("publish %s: %w (last error: %v)", subj, ctx.Err(), err)
		case <-time.After(backoff):
		}
		if backoff < 2*time.Second {
			backoff *= 2
		}
	}
}

// Permanent reports publish errors that no retry can fix.
func Permanent(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 10166: per-message TTL disabled; 10054: message size exceeds maximum;
		// 10060: expected stream does not match.
		switch apiErr.ErrorCode {
		case 10166, 10054, 10060:
			return true
		}
	}
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) || errors.Is(err, nats.ErrConnectionClosed)
}

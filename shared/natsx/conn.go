// Package natsx connects services to NATS and sets up the JetStream streams of
// DESIGN §3. Connections are named (visible in `nats server report
// connections`), reconnect forever with jittered backoff, and drain on
// shutdown so in-flight publishes and acks are not lost.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// Options are the connection settings of DESIGN §9.
type Options struct {
	URL      string // comma-separated server list
	Name     string // connection name, e.g. opswire-watcher/<pod>
	Creds    string // .creds file
	User     string
	Password string
	TLSCert  string
	TLSKey   string
	TLSCA    string
	// ReconnectBufSize bounds what is buffered while disconnected (default 8 MiB).
	ReconnectBufSize int
}

// Connect dials NATS. It retries the first connection too, so a service that
// starts before NATS waits instead of crash-looping. Events are logged without
// credentials.
func Connect(o Options, log zerolog.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(500 * time.Millisecond),
		nats.ReconnectJitter(250*time.Millisecond, time.Second),
		nats.PingInterval(10 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("server", nc.ConnectedServerName()).Msg("nats reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := log.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("nats async error")
		}),
	}
	if o.ReconnectBufSize != 0 {
		opts = append(opts, nats.ReconnectBufSize(o.ReconnectBufSize))
	} else {
		opts = append(opts, nats.ReconnectBufSize(8<<20))
	}
	if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	}
	if o.User != "" {
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	if o.TLSCert != "" || o.TLSKey != "" {
		opts = append(opts, nats.ClientCert(o.TLSCert, o.TLSKey))
	}
	if o.TLSCA != "" {
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	url := o.URL
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	return nc, nil
}

// WaitConnected blocks until the connection is up or ctx ends.
func WaitConnected(ctx context.Context, nc *nats.Conn) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !nc.IsConnected() {
		select {
		case <-ctx.Done():
			return errors.New("nats: not connected: " + ctx.Err().Error())
		case <-t.C:
		}
	}
	return nil
}

// Drain flushes pending work and closes the connection, waiting at most timeout.
func Drain(nc *nats.Conn, timeout time.Duration) {
	if nc == nil || nc.IsClosed() {
		return
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(timeout):
		nc.Close()
	}
}

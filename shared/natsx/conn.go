// Package natsx connects services to NATS and sets up the JetStream streams of
// DESIGN §3. Connections are named (visible in `nats server report
// connections`), reconnect forever with jittered backoff, and drain on
// shutdown so in-flight publishes and acks are not lost.
package natsx

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
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
	// InboxPrefix replaces "_INBOX" in the connection's reply subjects
	// (requests, JetStream API answers, publish acks, pull deliveries), so the
	// server can allow each user only its own inboxes (docs/security.md).
	// Empty keeps nats.go's "_INBOX".
	InboxPrefix string
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
		// A failed (re)connect attempt: a wrong CA, a refused password or a
		// server that is down. Logged when the reason changes, else at most
		// every 30 s; the error names the server, never the credentials.
		nats.ReconnectErrHandler(connectFailures(log)),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("server", nc.ConnectedServerName()).Msg("nats reconnected")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if refusedConsumerDelete(err) {
				// The deploy lets no service delete a KUBE consumer; nats.go's
				// ordered consumer tries to delete its previous consumer when
				// it resets, and the server removes that one after its
				// inactive threshold instead.
				log.Debug().Err(err).Msg("consumer delete refused; the server expires the consumer")
				return
			}
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
		// Verifies the server's certificate against this CA and the host name
		// of the URL (nats.go never skips verification unless told to).
		opts = append(opts, nats.RootCAs(o.TLSCA))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
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

// InboxPrefix is the reply-subject prefix of a NATS user: _INBOX_<user>
// (replies to <prefix>.<id>). The deploy's permissions allow each user to
// subscribe to its own _INBOX_<user>.> only. A user name that cannot be a
// subject token keeps nats.go's shared "_INBOX".
func InboxPrefix(user string) string {
	if user == "" || strings.ContainsAny(user, ".*> \t\r\n") {
		return ""
	}
	return "_INBOX_" + user
}

// refusedConsumerDelete is a permissions violation for a JetStream consumer
// delete request.
func refusedConsumerDelete(err error) bool {
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "Publish to \"$JS.API.CONSUMER.DELETE.")
}

// connectFailures logs failed connection attempts without flooding: a new
// reason at once, the same reason again after 30 s.
func connectFailures(log zerolog.Logger) nats.ConnErrHandler {
	var mu sync.Mutex
	var last string
	var at time.Time
	return func(nc *nats.Conn, err error) {
		if err == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if err.Error() == last && time.Since(at) < 30*time.Second {
			return
		}
		last, at = err.Error(), time.Now()
		log.Warn().Err(err).Str("servers", serverList(nc)).Msg("nats connect failed")
	}
}

// serverList is the connection's known servers, comma-separated, with any
// credentials in a URL redacted.
func serverList(nc *nats.Conn) string {
	if nc == nil {
		return ""
	}
	var out []string
	for _, s := range nc.Servers() {
		if pu, err := url.Parse(s); err == nil {
			out = append(out, pu.Redacted())
		}
	}
	return strings.Join(out, ",")
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

package harness

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/testport"
)

// NATS is a real nats-server with JetStream, embedded in the test process and
// listening on loopback TCP so service processes can reach it. Stop and
// Restart (same port, same storage) simulate an outage.
type NATS struct {
	URL  string
	Conn *nats.Conn // a client connection for the test itself
	JS   jetstream.JetStream

	opts *server.Options
	srv  *server.Server
}

// NATSOption adjusts the server.
type NATSOption func(*server.Options) error

// WithConfigFile loads a nats-server configuration file (accounts, users,
// permissions), keeping the harness's host, port and storage directory.
func WithConfigFile(path string) NATSOption {
	return func(o *server.Options) error {
		fo, err := server.ProcessConfigFile(path)
		if err != nil {
			return err
		}
		host, port, store := o.Host, o.Port, o.StoreDir
		*o = *fo
		o.Host, o.Port, o.StoreDir = host, port, store
		return nil
	}
}

// StartNATS starts the server and a test connection; both stop on cleanup.
// Options that add users make the test connection use NATSUser/NATSPassword.
func StartNATS(t testing.TB, opts ...NATSOption) *NATS {
	t.Helper()
	o := &server.Options{Host: "127.0.0.1", Port: testport.Must(t), StoreDir: t.TempDir()}
	for _, opt := range opts {
		if err := opt(o); err != nil {
			t.Fatalf("nats option: %v", err)
		}
	}
	o.JetStream, o.NoSigs, o.NoLog = true, true, true
	if o.StoreDir == "" {
		o.StoreDir = t.TempDir()
	}
	n := &NATS{opts: o}
	n.start(t)
	n.URL = n.srv.ClientURL()
	t.Cleanup(func() {
		if n.Conn != nil {
			n.Conn.Close()
		}
		n.Stop()
	})
	return n
}

// Connect opens a new test connection with the given options (e.g. nats.UserInfo).
func (n *NATS) Connect(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(n.URL, opts...)
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (n *NATS) start(t testing.TB) {
	t.Helper()
	s, err := server.NewServer(n.opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		t.Fatal("nats server not ready in 20s")
	}
	n.srv = s
	if n.Conn == nil && len(n.opts.Users) == 0 && len(n.opts.Nkeys) == 0 && n.opts.Accounts == nil {
		nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatalf("nats connect: %v", err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		n.Conn, n.JS = nc, js
	}
}

// Server is the running embedded server.
func (n *NATS) Server() *server.Server { return n.srv }

// Stop shuts the server down (clients see a disconnect).
func (n *NATS) Stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// Restart starts the server again on the same port with the same storage.
func (n *NATS) Restart(t testing.TB) {
	t.Helper()
	n.Stop()
	n.start(t)
}

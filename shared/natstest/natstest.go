// Package natstest starts a real, embedded nats-server with JetStream for
// tests: random port, temporary storage, shut down when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start runs a JetStream-enabled server on a random loopback port.
func Start(t testing.TB) *server.Server {
	t.Helper()
	return StartWithOptions(t, &server.Options{})
}

// StartWithOptions runs a server with the given options, filling in a random
// port, loopback host and a temporary JetStream directory when unset.
func StartWithOptions(t testing.TB, o *server.Options) *server.Server {
	t.Helper()
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	o.JetStream = true
	if o.StoreDir == "" {
		o.StoreDir = t.TempDir()
	}
	o.NoSigs = true
	o.NoLog = true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready in 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect starts a server and returns a plain client connection to it and a
// JetStream context built with opts; the connection closes when the test ends.
func Connect(t testing.TB, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(Start(t).ClientURL())
	if err != nil {
		t.Fatalf("nats connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

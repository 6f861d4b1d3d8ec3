// Package natstest starts a real, embedded nats-server with JetStream for
// tests: random port, temporary storage, shut down when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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

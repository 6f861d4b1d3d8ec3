package kubestate

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// A leader builds one mirror per term on the process's registry: the second
// must not panic on registration, and its synced gauge is its own.
func TestMirrorPerTermOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := New(nil, "c1", zerolog.Nop(), reg, Handlers{})
	first.markSynced()
	if got := testutil.ToFloat64(first.syncedGauge); got != 1 {
		t.Fatalf("first mirror synced = %v, want 1", got)
	}
	second := New(nil, "c1", zerolog.Nop(), reg, Handlers{})
	if got := testutil.ToFloat64(second.syncedGauge); got != 0 {
		t.Fatalf("a new term's mirror reports synced = %v before its load, want 0", got)
	}
	second.received.Inc()
	if n, err := testutil.GatherAndCount(reg, "opswire_kube_messages_received_total"); err != nil || n != 1 {
		t.Fatalf("received series = %d (%v), want one shared series", n, err)
	}
}

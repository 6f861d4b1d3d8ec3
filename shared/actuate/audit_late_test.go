package actuate

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/testkit"
)

// partitioned publishes through JetStream only while it is reachable, and
// reads OPS back always: a replica cut off from NATS for its publishes.
type partitioned struct {
	jetstream.JetStream
	down atomic.Bool
}

func (p *partitioned) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if p.down.Load() {
		return nil, nats.ErrNoResponders
	}
	return p.JetStream.PublishMsg(ctx, m, opts...)
}

// TestAuditorLateMessageCompletedByTheNextLeader: a replica cut off from
// NATS right after a write keeps its outcome queued; meanwhile the next
// leader completes the same outcome (same id) from its intent. When the
// replica reconnects after OPS's duplicate window, the stream no longer
// drops its copy: told the window, the Auditor looks the id up first and
// stores nothing (opswire_audit_late_found_total); without it the outcome is
// stored twice, which is what the check prevents.
func TestAuditorLateMessageCompletedByTheNextLeader(t *testing.T) {
	const window = time.Second
	for _, tc := range []struct {
		name   string
		opts   []AuditorOption
		copies int
		found  float64
	}{
		{"told the duplicate window: found, not stored again", []AuditorOption{WithDuplicateWindow(window)}, 1, 1},
		{"not told: stored a second time", nil, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, js := natstest.Connect(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := config.Default().NATS
			cfg.Duplicates = config.D(window)
			if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
				t.Fatal(err)
			}
			const subj = "ops.t.cleanup.deleted.apps.web-1"
			ev := event(t, "cleanup/uid-1/deleted")
			pub := &partitioned{JetStream: js}
			pub.down.Store(true)
			m := NewMetrics(nil)
			a := NewAuditor(pub, 200*time.Millisecond, m, zerolog.Nop(), tc.opts...)
			defer a.Close(time.Second)
			a.Publish(subj, ev)
			// The next leader completes the intent: the same outcome, stored.
			if _, err := natsx.PublishEvent(ctx, js, subj, ev, time.Second); err != nil {
				t.Fatal(err)
			}
			completed := time.Now()
			testkit.Eventually(t, 5*time.Second, "the duplicate window to pass", func() bool { return time.Since(completed) > window+200*time.Millisecond })
			pub.down.Store(false)
			testkit.Eventually(t, 10*time.Second, "the backlog gone", func() bool { return a.Backlog() == 0 })
			s, err := js.Stream(ctx, "OPS")
			if err != nil {
				t.Fatal(err)
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
			if err != nil {
				t.Fatal(err)
			}
			if got := int(info.State.Subjects[subj]); got != tc.copies {
				t.Errorf("OPS holds %d copies of the outcome, want %d", got, tc.copies)
			}
			if got := testutil.ToFloat64(m.AuditLateFound); got != tc.found {
				t.Errorf("late_found = %v, want %v", got, tc.found)
			}
		})
	}
}

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/test/harness"
)

// TestFaultOPSFull fills OPS past nats.opsMaxBytes while the Feishu receiver
// is down and its consumer is stuck at maxAckPending: the stream drops its
// oldest messages, and the notifier says so — the lost counter and an error
// log naming the receiver — and the count is exact: once Feishu is back, the
// cards account for every message that was not counted lost.
func TestFaultOPSFull(t *testing.T) {
	const total = 1500
	s := newNotifierSetup(t, "bot-secret-77c1", "bot-secret-77c1", "nats:\n  opsMaxBytes: 262144\nsendReport:\n  opsBudgetBytes: 65536\n")
	s.cfg = harness.WriteConfig(t, strings.Replace(readFile(t, s.cfg), "ackWait: 2s", "ackWait: 2s\n  maxAckPending: 20", 1))
	p := s.start(t)
	s.feishu.SetDown(true)
	publishCleanups(t, s.n.JS, 0, total)
	lost := func() float64 { return p.Metric(`opswire_notifier_ops_lost_undelivered_total{receiver="ops-feishu"}`) }
	harness.Eventually(t, 30*time.Second, "the notifier to count messages OPS dropped before Feishu's consumer got them", func() bool { return lost() > 0 })
	harness.Eventually(t, 10*time.Second, "the error log", func() bool {
		return strings.Contains(p.Logs(), "OPS dropped messages this receiver had not received")
	})
	backlog := p.Metric(`opswire_notifier_consumer_backlog{receiver="ops-feishu"}`)
	fill := p.Metric("opswire_notifier_ops_fill_ratio")
	st, err := s.n.JS.Stream(context.Background(), "OPS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Every drop has happened by now (nothing more is published); the next
	// look of the notifier counts the last of them.
	first := info.State.FirstSeq
	harness.Eventually(t, 10*time.Second, "the lost count to cover every dropped sequence the consumer had not reached", func() bool {
		c, err := s.n.JS.Consumer(context.Background(), "OPS", "opswire-notifier-e2e-ops-feishu")
		if err != nil {
			return false
		}
		ci, err := c.Info(context.Background())
		return err == nil && uint64(lost())+ci.Delivered.Stream >= first-1
	})
	s.feishu.SetDown(false)
	n := lost()
	harness.Eventually(t, 90*time.Second, "the rest delivered to Feishu", func() bool {
		return cardEvents(t, s.feishu.Cards("e2e-bot-token-5f1d")) >= total-int(n)
	})
	waitSettled(t, s.n.JS, 30*time.Second)
	got := cardEvents(t, s.feishu.Cards("e2e-bot-token-5f1d"))
	t.Logf("OPS MaxBytes 256 KiB, %d results published with Feishu down: stream dropped %d (first seq %d), the notifier counted %v lost (backlog %v, fill %.2f); %d delivered after Feishu came back; webhook lost %v",
		total, first-1, first, n, backlog, fill, got, p.Metric(`opswire_notifier_ops_lost_undelivered_total{receiver="audit"}`))
	if got+int(n) != total {
		t.Fatalf("delivered %d + counted lost %v = %d, want %d: the lost count is not exact", got, n, got+int(n), total)
	}
}

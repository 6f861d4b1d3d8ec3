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
	lost := func() float64 { return p.Metric(`opswire_notifier_ops_lost_undelivered_total{receiver="ops-feishu"}`) }
	// The series exists at 0 before any loss, so increase() sees the first.
	harness.Eventually(t, 10*time.Second, "the lost counter's series at 0", func() bool { return lost() == 0 })
	publishCleanups(t, s.n.JS, 0, total)
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
		return harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")) >= total-int(n)
	})
	waitSettled(t, s.n.JS, 30*time.Second)
	got := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d"))
	t.Logf("OPS MaxBytes 256 KiB, %d results published with Feishu down: stream dropped %d (first seq %d), the notifier counted %v lost (backlog %v, fill %.2f); %d delivered after Feishu came back; webhook lost %v",
		total, first-1, first, n, backlog, fill, got, p.Metric(`opswire_notifier_ops_lost_undelivered_total{receiver="audit"}`))
	if got+int(n) != total {
		t.Fatalf("delivered %d + counted lost %v = %d, want %d: the lost count is not exact", got, n, got+int(n), total)
	}
}

// TestFaultOPSFullNotifierDown: OPS overflows while no notifier is active.
// The first replica stops while Feishu is down and it holds maxAckPending
// messages (nak'ed at shutdown); 1,500 more are published with no notifier
// running, and OPS drops the oldest — the released ones among them. The next
// replica (another process, as after a failover) must count and log every
// message neither receiver got, and deliver the rest exactly once: per
// receiver, delivered (Feishu cards, webhook event ids, counted at the
// receivers) + counted lost = published.
func TestFaultOPSFullNotifierDown(t *testing.T) {
	const first, total = 30, 1530
	s := newNotifierSetup(t, "bot-secret-77c1", "bot-secret-77c1", "nats:\n  opsMaxBytes: 262144\nsendReport:\n  opsBudgetBytes: 65536\n")
	s.cfg = harness.WriteConfig(t, strings.Replace(readFile(t, s.cfg), "ackWait: 2s", "ackWait: 2s\n  maxAckPending: 20", 1))
	p1 := s.start(t)
	s.feishu.SetDown(true)
	publishCleanups(t, s.n.JS, 0, first)
	harness.Eventually(t, 30*time.Second, "the webhook to get the first messages and Feishu's consumer to hold maxAckPending", func() bool {
		c, err := s.n.JS.Consumer(context.Background(), "OPS", "opswire-notifier-e2e-ops-feishu")
		if err != nil {
			return false
		}
		ci, err := c.Info(context.Background())
		return err == nil && ci.NumAckPending == 20 && hookDistinct(s) == first
	})
	for _, r := range []string{"ops-feishu", "audit"} {
		if v := p1.Metric(`opswire_notifier_ops_lost_undelivered_total{receiver="` + r + `"}`); v != 0 {
			t.Fatalf("%s: lost %v before OPS was full", r, v)
		}
	}
	p1.Stop()
	publishCleanups(t, s.n.JS, first, total-first)
	st, err := s.n.JS.Stream(context.Background(), "OPS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq <= first {
		t.Fatalf("OPS first sequence %d: the released messages were not dropped; the test proves nothing", info.State.FirstSeq)
	}
	s.feishu.SetDown(false)
	p2 := harness.StartService(t, "notifier", harness.ServiceOptions{Config: s.cfg, NATSURL: s.n.URL, ID: "notifier-b", Env: s.env})
	p2.WaitReady(t, 30*time.Second)
	lost := func(r string) int {
		return int(p2.Metric(`opswire_notifier_ops_lost_undelivered_total{receiver="` + r + `"}`))
	}
	harness.Eventually(t, 30*time.Second, "the new replica to count what OPS dropped while no notifier ran", func() bool {
		return lost("ops-feishu") > 0 && lost("audit") > 0
	})
	if !strings.Contains(p2.Logs(), "OPS dropped messages this receiver had not received") {
		t.Fatal("no error log for the lost messages")
	}
	harness.Eventually(t, 120*time.Second, "every message delivered or counted lost, per receiver", func() bool {
		return harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d"))+lost("ops-feishu") >= total &&
			hookDistinct(s)+lost("audit") >= total
	})
	waitSettled(t, s.n.JS, 30*time.Second)
	cards := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d"))
	hook, dup := s.hook.counts()
	t.Logf("OPS MaxBytes 256 KiB: %d published, %d held by the stopped replica; first seq %d when the next started; Feishu delivered %d + counted lost %d, webhook delivered %d + counted lost %d",
		total, 20, info.State.FirstSeq, cards, lost("ops-feishu"), hook, lost("audit"))
	if cards+lost("ops-feishu") != total {
		t.Errorf("Feishu: delivered %d + counted lost %d = %d, want %d", cards, lost("ops-feishu"), cards+lost("ops-feishu"), total)
	}
	if hook+lost("audit") != total {
		t.Errorf("webhook: delivered %d + counted lost %d = %d, want %d", hook, lost("audit"), hook+lost("audit"), total)
	}
	if dup != 0 {
		t.Errorf("webhook got %d events more than once", dup)
	}
}

func hookDistinct(s *notifierSetup) int { n, _ := s.hook.counts(); return n }

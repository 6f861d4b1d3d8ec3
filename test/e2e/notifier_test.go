package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// TestNotifierBurst: 500 OPS messages in a burst become a handful of cards,
// every pod is accounted for, each event reaches the generic webhook exactly
// once, and the bot's rate limits are never exceeded.
func TestNotifierBurst(t *testing.T) {
	s := newNotifierSetup(t, "bot-secret-9c2e", "bot-secret-9c2e", "")
	p := s.start(t)
	publishCleanups(t, s.n.JS, 0, 500)

	harness.Eventually(t, 60*time.Second, "500 events on the webhook and in cards", func() bool {
		distinct, _ := s.hook.counts()
		return distinct == 500 && harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")) == 500
	})
	waitSettled(t, s.n.JS, 20*time.Second)
	cards := s.feishu.Cards("e2e-bot-token-5f1d")
	if len(cards) > 10 {
		t.Errorf("%d cards for a burst of 500, want a handful", len(cards))
	}
	if _, dup := s.hook.counts(); dup != 0 {
		t.Errorf("%d events reached the webhook more than once", dup)
	}
	if got := harness.CardResults(t, cards); got != 500 {
		t.Errorf("cards account for %d events, want 500", got)
	}
	if v := s.feishu.RateViolations(); v != 0 {
		t.Errorf("%d requests exceeded Feishu's rate limits", v)
	}
	for _, r := range s.feishu.Requests() {
		if r.Size > feishutest.BodyLimit || !r.Signed {
			t.Errorf("request of %d bytes, signed=%v", r.Size, r.Signed)
		}
	}
	big := cards[0].Text()
	for _, want := range []string{"Pod reasons:", "Evicted", "…and ", "cluster e2e"} {
		if !strings.Contains(big, want) {
			t.Errorf("card lacks %q:\n%s", want, big)
		}
	}
	t.Logf("500 events -> %d cards, %d webhook posts; first card:\n%s", len(cards), s.hook.n, big)
	if v := p.Metric(`opswire_notifier_events_total{outcome="delivered",receiver="ops-feishu"}`); v != 500 {
		t.Errorf("delivered events metric = %v, want 500", v)
	}
	assertNoSecrets(t, p.Logs(), s.botURL, "e2e-bot-token-5f1d", s.secret, s.hookURL, "e2e-hook-token-77aa")
}

// TestNotifierReceiverOutage: the Feishu endpoint is down for 30 s; every
// event is delivered afterwards, none twice.
func TestNotifierReceiverOutage(t *testing.T) {
	s := newNotifierSetup(t, "bot-secret-1b7f", "bot-secret-1b7f", "")
	p := s.start(t)
	s.feishu.SetDown(true)
	downSince := time.Now()
	publishCleanups(t, s.n.JS, 0, 60)
	harness.Eventually(t, 20*time.Second, "the notifier to hit the outage", func() bool { return s.feishu.Count(-1) >= 2 })
	// The webhook is up: it gets everything while Feishu is down.
	harness.Eventually(t, 20*time.Second, "60 events on the webhook", func() bool { d, _ := s.hook.counts(); return d == 60 })
	publishCleanups(t, s.n.JS, 60, 40) // more arrive during the outage
	time.Sleep(time.Until(downSince.Add(30 * time.Second)))
	s.feishu.SetDown(false)
	harness.Eventually(t, 60*time.Second, "all 100 events in cards after the outage", func() bool {
		return harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")) >= 100
	})
	waitSettled(t, s.n.JS, 20*time.Second)
	if got := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")); got != 100 {
		t.Errorf("cards account for %d events, want exactly 100", got)
	}
	if d, dup := s.hook.counts(); d != 100 || dup != 0 {
		t.Errorf("webhook: %d distinct events, %d duplicates; want 100, 0", d, dup)
	}
	if v := s.feishu.RateViolations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
	t.Logf("refused during the outage: %d attempts; cards after: %d", s.feishu.Count(-1), len(s.feishu.Cards("e2e-bot-token-5f1d")))
	assertNoSecrets(t, p.Logs(), s.botURL, "e2e-bot-token-5f1d", s.secret, s.hookURL, "e2e-hook-token-77aa")
}

// TestNotifierSIGKILLMidBurst: two replicas; the active one is killed while
// it holds part of a burst. The standby takes over when the lease expires
// and gets the held messages after AckWait: nothing is lost, nothing is
// duplicated, and the bot's rate limits hold across the failover.
func TestNotifierSIGKILLMidBurst(t *testing.T) {
	s := newNotifierSetup(t, "bot-secret-4d0a", "bot-secret-4d0a", notifierLease)
	// A long group interval keeps the second half held when the kill comes.
	s.cfg = strings.Replace(readFile(t, s.cfg), "groupInterval: 1s", "groupInterval: 5s", 1)
	s.cfg = harness.WriteConfig(t, s.cfg)
	p, standby := s.startReplicas(t)
	delivered := make(chan string, 16)
	sub, err := s.n.Conn.Subscribe("notify."+notifierCluster+".*.delivered", func(m *nats.Msg) {
		var o struct {
			Receiver string `json:"receiver"`
		}
		_ = json.Unmarshal(m.Data, &o)
		delivered <- o.Receiver
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	publishCleanups(t, s.n.JS, 0, 300)
	got := map[string]bool{}
	harness.Eventually(t, 30*time.Second, "first delivery to both receivers", func() bool {
		for {
			select {
			case r := <-delivered:
				got[r] = true
			default:
				return got["ops-feishu"] && got["audit"]
			}
		}
	})
	publishCleanups(t, s.n.JS, 300, 200)
	p.Kill()
	held, _ := s.hook.counts()
	t.Logf("killed with %d of 500 events delivered to the webhook", held)
	if held >= 500 {
		t.Fatalf("the whole burst was delivered before the kill; the test proves nothing")
	}

	harness.Eventually(t, 30*time.Second, "the standby active", func() bool { return standby.Metric("opswire_notifier_active") == 1 })
	harness.Eventually(t, 60*time.Second, "all 500 events after the failover", func() bool {
		d, _ := s.hook.counts()
		return d == 500 && harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")) >= 500
	})
	waitSettled(t, s.n.JS, 30*time.Second)
	assertExactlyOnce(t, s, 500)
	if v := s.feishu.RateViolations(); v != 0 {
		t.Errorf("%d rate-limit answers across the failover", v)
	}
	assertNoSecrets(t, standby.Logs(), s.botURL, "e2e-bot-token-5f1d", s.secret, s.hookURL, "e2e-hook-token-77aa")
}

// TestNotifierWrongSecret: a bot whose secret does not match answers 19021.
// The notifier logs an error naming the receiver (not the URL), counts it,
// dead-letters the events and does not retry.
func TestNotifierWrongSecret(t *testing.T) {
	s := newNotifierSetup(t, "the-right-secret", "a-wrong-secret-e51", "")
	p := s.start(t)
	publishCleanups(t, s.n.JS, 0, 3)
	series := `opswire_notifier_dead_letters_total{reason="signature",receiver="ops-feishu"}`
	harness.Eventually(t, 30*time.Second, "3 dead letters for ops-feishu", func() bool { return p.Metric(series) == 3 })
	waitSettled(t, s.n.JS, 20*time.Second)
	harness.Never(t, 3*time.Second, "a retry after 19021", func() bool { return s.feishu.Count(feishutest.CodeSignMismatch) > 1 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dlq, err := s.n.JS.Stream(ctx, "DLQ")
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx)
	if err != nil || info.State.Msgs != 3 {
		t.Fatalf("DLQ holds %v messages (err %v), want 3", info.State.Msgs, err)
	}
	m, err := dlq.GetLastMsgForSubject(ctx, "dlq."+notifierCluster+".notifier.ops-feishu")
	if err != nil || m.Header.Get("Opswire-Dlq-Reason") != "signature" || m.Header.Get("ce-type") == "" {
		t.Fatalf("dead letter = %+v, %v", m, err)
	}
	logs := p.Logs()
	found := false
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `"level":"error"`) && strings.Contains(line, `"receiver":"ops-feishu"`) && strings.Contains(line, "19021") {
			found = true
		}
	}
	if !found {
		t.Errorf("no error log naming receiver ops-feishu with code 19021")
	}
	if d, _ := s.hook.counts(); d != 3 {
		t.Errorf("the healthy webhook got %d events, want 3 (one bad receiver must not block another)", d)
	}
	assertNoSecrets(t, logs, s.botURL, "e2e-bot-token-5f1d", s.secret, "the-right-secret", s.hookURL, "e2e-hook-token-77aa")
}

func readFile(t *testing.T, path string) string {
	b, err := readAll(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// notifierLease is the controller section for notifier replicas: a short
// lease so a standby takes over within seconds of a SIGKILL.
const notifierLease = `controller:
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 300ms
`

// startReplicas starts two notifier replicas and returns the active one
// first.
func (s *notifierSetup) startReplicas(t *testing.T) (active, standby *harness.Process) {
	t.Helper()
	a := harness.StartService(t, "notifier", harness.ServiceOptions{Config: s.cfg, NATSURL: s.n.URL, ID: "notifier-a", Env: s.env})
	b := harness.StartService(t, "notifier", harness.ServiceOptions{Config: s.cfg, NATSURL: s.n.URL, ID: "notifier-b", Env: s.env})
	a.WaitReady(t, 30*time.Second)
	b.WaitReady(t, 30*time.Second)
	return activeOf(t, a, b)
}

// activeOf waits until exactly one of a, b is active and returns it first.
func activeOf(t *testing.T, a, b *harness.Process) (*harness.Process, *harness.Process) {
	t.Helper()
	var act, stb *harness.Process
	harness.Eventually(t, 20*time.Second, "one active notifier replica", func() bool {
		ma, mb := a.Metric("opswire_notifier_active"), b.Metric("opswire_notifier_active")
		switch {
		case ma == 1 && mb == 0:
			act, stb = a, b
		case mb == 1 && ma == 0:
			act, stb = b, a
		default:
			return false
		}
		return true
	})
	return act, stb
}

// cardIDs counts how often each pod appears across the accepted cards'
// "**N** cleanup results" totals and the webhook's event ids.
func assertExactlyOnce(t *testing.T, s *notifierSetup, want int) {
	t.Helper()
	if got := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")); got != want {
		t.Errorf("cards account for %d events, want exactly %d", got, want)
	}
	if d, dup := s.hook.counts(); d != want || dup != 0 {
		t.Errorf("webhook: %d distinct events, %d received more than once; want %d, 0", d, dup, want)
	}
}

// TestNotifierReplicasEvictedBurst: 500 evicted pods on a real API server,
// deleted by the real cleanup actor, reported by two notifier replicas:
// one card (what one replica makes of a burst that fits its group wait),
// zero rate-limit answers, every pod once across cards and on the webhook
// (counted at the receivers, so the streams' dedup cannot hide a repeat).
func TestNotifierReplicasEvictedBurst(t *testing.T) {
	const total = 500
	cp := harness.StartControlPlane(t)
	s := newNotifierSetup(t, "bot-secret-77e1", "bot-secret-77e1", notifierLease+`kube: {qps: 400, burst: 800}
delException:
  interval: 1s
  minAge: 0s
  maxDeletionsPerMinute: 100000
`)
	// One card for the whole burst: the group waits longer than the
	// deletions take (checked below from the audit log).
	const groupWait = 20 * time.Second
	s.cfg = harness.WriteConfig(t, strings.Replace(readFile(t, s.cfg), "groupWait: 300ms", "groupWait: 20s", 1))
	cfgText := readFile(t, s.cfg)
	cfgText = strings.Replace(cfgText, "controller:\n", "controller:\n  leaseLockNamespace: default\n", 1)
	s.cfg = harness.WriteConfig(t, cfgText)

	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "bulk")
	startWatcher(t, cp, s.n, s.cfg, "w1")
	for i := range total {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("ev-%03d", i), worker.Name)))
	}
	harness.Eventually(t, 60*time.Second, "all evictions in KUBE", func() bool {
		for i := range total {
			st := lastPod(t, s.n.JS, "kube.e2e.pod.bulk."+fmt.Sprintf("ev-%03d", i))
			if st == nil || st.Phase != "Failed" {
				return false
			}
		}
		return true
	})
	active, standby := s.startReplicas(t)
	ops := harness.CollectOps(t, s.n, "ops.e2e.cleanup.>")
	startCleanup(t, s.n, s.cfg, cleanupKubeconfig(t, cp), "c1").WaitReady(t, 60*time.Second)
	deleted := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cleanup.deleted.bulk.") }
	harness.Eventually(t, 90*time.Second, "500 deletions audited", func() bool { return ops.Count(deleted) >= total })

	var times []time.Time
	for _, m := range ops.All() {
		if deleted(m) {
			times = append(times, decision(t, m).Time)
		}
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	spread := times[len(times)-1].Sub(times[0])
	if spread >= groupWait-5*time.Second {
		t.Fatalf("the deletions took %v, too close to groupWait %v for one replica to make one card; the test proves nothing", spread, groupWait)
	}
	harness.Eventually(t, groupWait+60*time.Second, "500 events in cards and on the webhook", func() bool {
		d, _ := s.hook.counts()
		return d == total && harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")) >= total
	})
	waitSettled(t, s.n.JS, 30*time.Second)
	assertExactlyOnce(t, s, total)
	cards := s.feishu.Cards("e2e-bot-token-5f1d")
	if len(cards) != 1 {
		t.Errorf("%d cards; one replica makes 1 card of a burst within its group wait", len(cards))
	}
	if v := s.feishu.RateViolations(); v != 0 {
		t.Errorf("%d rate-limit answers", v)
	}
	if s.hook.n != 1 {
		t.Errorf("%d webhook posts, want 1", s.hook.n)
	}
	if v := standby.Metric(`opswire_notifier_send_attempts_total{reason="",receiver="ops-feishu",result="ok"}`); v > 0 {
		t.Errorf("the standby sent %v cards", v)
	}
	t.Logf("500 deletions over %v -> %d card(s), %d webhook post(s); first card:\n%s", spread, len(cards), s.hook.n, cards[0].Text())
	assertNoSecrets(t, active.Logs()+standby.Logs(), s.botURL, "e2e-bot-token-5f1d", s.secret, s.hookURL, "e2e-hook-token-77aa")
}

// TestNotifierReplicasSIGTERMMidRequest: the active replica is SIGTERMed
// while its POST is at the receiver. It lets the request finish, records
// and acks it, and releases the lease; the standby takes over and delivers
// the rest. No card twice, none missing.
func TestNotifierReplicasSIGTERMMidRequest(t *testing.T) {
	s := newNotifierSetup(t, "bot-secret-3a9d", "bot-secret-3a9d", notifierLease)
	// The receiver answers after 3 s: the request timeout must outlast that
	// and stay under two thirds of ackWait (config validation).
	s.cfg = harness.WriteConfig(t, strings.Replace(readFile(t, s.cfg), "ackWait: 2s", "ackWait: 9s\n  requestTimeout: 5s", 1))
	active, standby := s.startReplicas(t)
	s.feishu.SetLatency(3 * time.Second)
	publishCleanups(t, s.n.JS, 0, 100)
	harness.Eventually(t, 20*time.Second, "a card in flight", func() bool { return s.feishu.InFlight() > 0 })
	stopped := time.Now()
	if code := active.Stop(); code != 0 {
		t.Errorf("SIGTERMed notifier exited %d", code)
	}
	if took := time.Since(stopped); took < time.Second {
		t.Errorf("shutdown took %v: it did not wait for the request in flight", took)
	}
	if got := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")); got == 0 {
		t.Fatalf("the card in flight was not accepted before the exit")
	}
	if !strings.Contains(active.Logs(), "lease released") {
		t.Errorf("the stopped replica did not release the lease")
	}
	s.feishu.SetLatency(0)
	harness.Eventually(t, 20*time.Second, "the standby active", func() bool { return standby.Metric("opswire_notifier_active") == 1 })
	publishCleanups(t, s.n.JS, 100, 50)
	harness.Eventually(t, 60*time.Second, "all 150 events delivered", func() bool {
		d, _ := s.hook.counts()
		return d == 150 && harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")) >= 150
	})
	waitSettled(t, s.n.JS, 30*time.Second)
	assertExactlyOnce(t, s, 150)
	if v := s.feishu.RateViolations(); v != 0 {
		t.Errorf("%d rate-limit answers", v)
	}
}

// TestNotifierDeadLetterStreamOutageAndReplay: the receiver rejects the
// signature while the DLQ stream is gone: nothing is acked and the messages
// stay pending; when the stream is back they are dead-lettered; once the
// secret is fixed, the replay request delivers them exactly once.
func TestNotifierDeadLetterStreamOutageAndReplay(t *testing.T) {
	const n = 5
	s := newNotifierSetup(t, "the-right-secret", "a-wrong-secret-d41", notifierLease)
	p := s.start(t)
	ctx := context.Background()
	harness.Eventually(t, 20*time.Second, "the notifier active with its consumers", func() bool {
		_, err := s.n.JS.Consumer(ctx, "OPS", "opswire-notifier-"+notifierCluster+"-ops-feishu")
		return p.Metric("opswire_notifier_active") == 1 && err == nil
	})
	if err := s.n.JS.DeleteStream(ctx, "DLQ"); err != nil {
		t.Fatal(err)
	}
	publishCleanups(t, s.n.JS, 0, n)
	harness.Eventually(t, 60*time.Second, "two rounds of rejected sends with no DLQ", func() bool {
		return s.feishu.Count(feishutest.CodeSignMismatch) >= 2 && p.Metric(`opswire_notifier_dead_letter_errors_total{receiver="ops-feishu"}`) >= 2
	})
	cons, err := s.n.JS.Consumer(ctx, "OPS", "opswire-notifier-"+notifierCluster+"-ops-feishu")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != 0 || info.NumAckPending+int(info.NumPending) != n {
		t.Fatalf("ack floor %d, %d unacked + %d pending; want nothing acked, all %d pending", info.AckFloor.Stream, info.NumAckPending, info.NumPending, n)
	}
	if !strings.Contains(p.Logs(), "CANNOT STORE DEAD LETTERS") {
		t.Errorf("no loud log about the failed dead-letter writes")
	}

	// The operator restores the stream (the notifier would also recreate it
	// on its next start).
	if _, err := s.n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "DLQ", Subjects: []string{"dlq.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, s.n.JS, 60*time.Second)
	dlqSubject := "dlq." + notifierCluster + ".notifier.ops-feishu"
	dlqCount := func() uint64 {
		st, err := s.n.JS.Stream(ctx, "DLQ")
		if err != nil {
			t.Fatal(err)
		}
		si, err := st.Info(ctx, jetstream.WithSubjectFilter(dlqSubject))
		if err != nil {
			t.Fatal(err)
		}
		return si.State.Subjects[dlqSubject]
	}
	if got := dlqCount(); got != n {
		t.Fatalf("%d dead letters, want %d", got, n)
	}
	if got := len(s.feishu.Cards("e2e-bot-token-5f1d")); got != 0 {
		t.Fatalf("%d cards accepted with the wrong secret", got)
	}

	// The secret is fixed: the notifier restarts with the right one.
	p.Stop()
	s.env = []string{"E2E_FEISHU_URL=" + s.botURL, "E2E_FEISHU_SECRET=the-right-secret"}
	p2 := harness.StartService(t, "notifier", harness.ServiceOptions{Config: s.cfg, NATSURL: s.n.URL, ID: "notifier-fixed", Env: s.env})
	p2.WaitReady(t, 30*time.Second)
	harness.Eventually(t, 20*time.Second, "the fixed notifier active", func() bool { return p2.Metric("opswire_notifier_active") == 1 })
	// "notifier running" is logged once the replay subjects are subscribed
	// (the active gauge turns 1 when the lease is taken, before that: a
	// request in between had no responders once in CI).
	harness.Eventually(t, 20*time.Second, "the fixed notifier running", func() bool { return strings.Contains(p2.Logs(), `"message":"notifier running"`) })
	replay := func() []map[string]any {
		m, err := s.n.Conn.Request("ctl."+notifierCluster+".notifier.replay", []byte(`{"receiver":"ops-feishu"}`), 60*time.Second)
		if err != nil {
			t.Fatalf("replay request: %v", err)
		}
		var out []map[string]any
		if err := json.Unmarshal(m.Data, &out); err != nil || len(out) != 1 {
			t.Fatalf("replay answer %s: %v", m.Data, err)
		}
		return out
	}
	res := replay()[0]
	if res["delivered"] != float64(n) || res["failed"] != float64(0) {
		t.Fatalf("replay = %v, want %d delivered", res, n)
	}
	if got := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")); got != n {
		t.Errorf("cards account for %d events after the replay, want %d", got, n)
	}
	if got := dlqCount(); got != 0 {
		t.Errorf("%d dead letters left after the replay", got)
	}
	res = replay()[0]
	if res["delivered"] != float64(0) || res["deadLetters"] != float64(0) {
		t.Errorf("second replay = %v, want nothing to do", res)
	}
	if got := harness.CardResults(t, s.feishu.Cards("e2e-bot-token-5f1d")); got != n {
		t.Errorf("cards account for %d events after a second replay, want still %d", got, n)
	}
	if d, dup := s.hook.counts(); d != n || dup != 0 {
		t.Errorf("webhook: %d distinct, %d duplicates; want %d, 0", d, dup, n)
	}
	assertNoSecrets(t, p.Logs()+p2.Logs(), s.botURL, "e2e-bot-token-5f1d", "the-right-secret", "a-wrong-secret-d41", s.hookURL, "e2e-hook-token-77aa")
}

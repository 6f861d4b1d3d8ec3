package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// The fleet stream of TestNotifierFleet and the clusters it carries.
const (
	fleetStream = "OPS_FLEET"
	fleetTokAll = "fleet-all-token-3b7c"
	fleetTokB   = "fleet-b-token-91d0"
	fleetTokDLQ = "fleet-late-token-c4e2"
)

// fleetEvents are how many evicted pods each cluster's cleanup deletes.
var fleetEvents = map[string]int{"a": 20, "b": 30}

// TestNotifierFleet: a notifier in fleet mode (notifier.stream OPS_FLEET,
// notifier.clusters ["*"]) on a real nats-server whose fleet stream sources
// cluster a's and cluster b's OPS streams. It creates no stream and is not
// ready until the fleet stream exists; then the evicted-pod results of each
// cluster become one card per cluster naming it at the catch-all bot, a
// route with clusters [b] gets only b's, and a receiver with a wrong secret
// dead-letters per cluster: after the fix (a restart, which sends nothing
// again) ctl.a.notifier.replay delivers a's dead letters only, then
// ctl.b.notifier.replay b's. Cards are counted at the Feishu test server.
func TestNotifierFleet(t *testing.T) {
	n := harness.StartNATS(t)
	ctx := context.Background()
	feishu := feishutest.NewServer()
	t.Cleanup(feishu.Close)
	allURL := feishu.AddBot(fleetTokAll, feishutest.Bot{Secret: "fleet-secret-all"})
	bURL := feishu.AddBot(fleetTokB, feishutest.Bot{Secret: "fleet-secret-b"})
	lateURL := feishu.AddBot(fleetTokDLQ, feishutest.Bot{Secret: "fleet-secret-late"})
	env := func(lateSecret string) []string {
		return []string{"ALL_URL=" + allURL, "ALL_SECRET=fleet-secret-all", "B_URL=" + bURL, "B_SECRET=fleet-secret-b",
			"LATE_URL=" + lateURL, "LATE_SECRET=" + lateSecret}
	}
	cfg := harness.WriteConfig(t, notifierLease+`cluster: {name: hub}
notifier:
  stream: `+fleetStream+`
  clusters: ["*"]
  groupWait: 1s
  groupInterval: 2s
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  receivers:
  - {name: all-feishu, urlEnv: ALL_URL, secretEnv: ALL_SECRET}
  - {name: b-feishu, urlEnv: B_URL, secretEnv: B_SECRET}
  - {name: late-feishu, urlEnv: LATE_URL, secretEnv: LATE_SECRET}
  routes:
  - {name: b-only, clusters: [b], receivers: [b-feishu], continue: true}
  - {name: everything, subjects: ['ops.*.cleanup.>'], receivers: [all-feishu, late-feishu]}
`)
	// --manage-streams is left at its default (true): a fleet notifier
	// still creates no stream and waits for its own.
	p := harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "hub-notifier-1", Env: env("a-wrong-secret-77")})
	harness.Eventually(t, 30*time.Second, "the notifier waiting for its fleet stream", func() bool {
		return strings.Contains(p.Logs(), `"stream":"`+fleetStream+`"`) && strings.Contains(p.Logs(), "waiting for the stream")
	})
	harness.Never(t, time.Second, "the notifier active without its fleet stream", func() bool {
		return p.Metric("opswire_notifier_active") == 1
	})
	for _, name := range []string{subject.KubeStream, subject.OpsStream, fleetStream} {
		if _, err := n.JS.Stream(ctx, name); err == nil {
			t.Fatalf("stream %s exists: the fleet notifier must not create streams", name)
		}
	}
	// The hub: each cluster's OPS (here on the same server, under its own
	// name) sourced into the fleet-wide stream.
	for _, c := range []string{"a", "b"} {
		if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS_" + strings.ToUpper(c),
			Subjects: []string{"ops." + c + ".>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.JS.CreateStream(ctx, jetstream.StreamConfig{Name: fleetStream, Storage: jetstream.FileStorage,
		Sources: []*jetstream.StreamSource{{Name: "OPS_A"}, {Name: "OPS_B"}}, Duplicates: 10 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	p.WaitReady(t, 30*time.Second)
	harness.Eventually(t, 20*time.Second, "the fleet notifier active", func() bool { return p.Metric("opswire_notifier_active") == 1 })

	for c, count := range fleetEvents {
		publishEvicted(t, n.JS, c, count)
	}
	fleetSettled(t, n.JS, 60*time.Second, 50)

	// One card per cluster at the catch-all bot, only b's at b's bot.
	all := cardsByCluster(t, feishu.Cards(fleetTokAll))
	if len(all["a"]) != 1 || len(all["b"]) != 1 || harness.CardResults(t, all["a"]) != 20 || harness.CardResults(t, all["b"]) != 30 {
		t.Errorf("catch-all bot: %d cards of a (%d events), %d of b (%d events); want one card each with 20 and 30",
			len(all["a"]), harness.CardResults(t, all["a"]), len(all["b"]), harness.CardResults(t, all["b"]))
	}
	onlyB := cardsByCluster(t, feishu.Cards(fleetTokB))
	if len(onlyB["a"]) != 0 || len(onlyB["b"]) != 1 || harness.CardResults(t, onlyB["b"]) != 30 {
		t.Errorf("clusters [b] bot: %d cards of a, %d of b (%d events); want none of a, one of b with 30",
			len(onlyB["a"]), len(onlyB["b"]), harness.CardResults(t, onlyB["b"]))
	}
	for _, c := range []string{"a", "b"} {
		if len(all[c]) > 0 {
			t.Logf("catch-all card of cluster %s:\n%s", c, all[c][0].Text())
		}
	}
	if len(feishu.Cards(fleetTokDLQ)) != 0 {
		t.Fatalf("the bot with the wrong secret accepted cards")
	}
	dlqCount := func(c string) uint64 {
		st, err := n.JS.Stream(ctx, "DLQ")
		if err != nil {
			t.Fatal(err)
		}
		subj := "dlq." + c + ".notifier.late-feishu"
		si, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			t.Fatal(err)
		}
		return si.State.Subjects[subj]
	}
	if a, b := dlqCount("a"), dlqCount("b"); a != 20 || b != 30 {
		t.Fatalf("dead letters: %d of a, %d of b; want 20 and 30", a, b)
	}
	if v := p.Metric(`opswire_notifier_deliveries_total{outcome="delivered",receiver="all-feishu"}`); v != 2 {
		t.Errorf("all-feishu delivered %v cards, want 2 (one per cluster)", v)
	}
	if v := feishu.RateViolations(); v != 0 {
		t.Errorf("%d requests exceeded Feishu's rate limits", v)
	}

	// The secret is fixed; the restarted notifier resumes its consumers
	// (same names) and sends nothing twice.
	if code := p.Stop(); code != 0 {
		t.Fatalf("notifier exit code %d", code)
	}
	p2 := harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "hub-notifier-2", Env: env("fleet-secret-late")})
	p2.WaitReady(t, 30*time.Second)
	// "notifier running" is logged once the replay subjects are subscribed
	// (the active gauge turns 1 before that).
	harness.Eventually(t, 20*time.Second, "the fixed notifier running", func() bool { return strings.Contains(p2.Logs(), `"message":"notifier running"`) })
	replay := func(c string) map[string]any {
		m, err := n.Conn.Request("ctl."+c+".notifier.replay", []byte(`{"receiver":"late-feishu"}`), 60*time.Second)
		if err != nil {
			t.Fatalf("replay request for %s: %v", c, err)
		}
		var out []map[string]any
		if err := json.Unmarshal(m.Data, &out); err != nil || len(out) != 1 {
			t.Fatalf("replay answer %s: %v", m.Data, err)
		}
		return out[0]
	}
	if res := replay("a"); res["cluster"] != "a" || res["delivered"] != float64(20) || res["cards"] != float64(1) || res["failed"] != float64(0) {
		t.Fatalf("replay of a = %v, want a's 20 delivered in 1 card", res)
	}
	if a, b := dlqCount("a"), dlqCount("b"); a != 0 || b != 30 {
		t.Fatalf("after a's replay: %d dead letters of a, %d of b; want 0 and 30", a, b)
	}
	if res := replay("b"); res["cluster"] != "b" || res["delivered"] != float64(30) || res["cards"] != float64(1) {
		t.Fatalf("replay of b = %v, want b's 30 delivered in 1 card", res)
	}
	late := cardsByCluster(t, feishu.Cards(fleetTokDLQ))
	if len(late["a"]) != 1 || len(late["b"]) != 1 || harness.CardResults(t, late["a"]) != 20 || harness.CardResults(t, late["b"]) != 30 {
		t.Errorf("replayed cards: %d of a, %d of b; want one each with 20 and 30", len(late["a"]), len(late["b"]))
	}
	if res := replay("a"); res["deadLetters"] != float64(0) || res["delivered"] != float64(0) {
		t.Errorf("second replay of a = %v, want nothing", res)
	}
	// Nothing was sent twice by the restart (counted at the receiver).
	harness.Never(t, 3*time.Second, "a card sent again after the restart", func() bool {
		return len(feishu.Cards(fleetTokAll)) != 2 || len(feishu.Cards(fleetTokB)) != 1 || len(feishu.Cards(fleetTokDLQ)) != 2
	})
	assertNoSecrets(t, p.Logs()+p2.Logs(), allURL, bURL, lateURL, fleetTokAll, fleetTokB, fleetTokDLQ,
		"fleet-secret-all", "fleet-secret-b", "fleet-secret-late", "a-wrong-secret-77")
}

// publishEvicted stores count evicted-pod cleanup results of cluster c the
// way the cleanup actor does: its envelope, subject and publish path.
func publishEvicted(t *testing.T, js jetstream.JetStream, c string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < count; i++ {
		ns, pod := "team-"+c, fmt.Sprintf("batch-%s-%03d", c, i)
		uid := fmt.Sprintf("%s0000000-0000-0000-0000-%012d", c, i)
		d := events.CleanupDecision{Verb: "deleted", Action: "delete", Namespace: ns, Pod: pod, PodUID: uid,
			Node: c + "-node-1", Phase: "Failed", PodReason: "Evicted", Reason: "evicted pod older than minAge",
			AgeSeconds: 120, Severity: events.SeverityWarning, Time: time.Now().UTC()}
		ev, err := envelope.New("cleanup/"+uid+"/deleted", envelope.Source(c, "cleanup"), events.TypeCleanup, ns+"/"+pod, d, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := natsx.PublishEvent(ctx, js, subject.Ops(c, "cleanup", "deleted", ns, pod), ev, 5*time.Second); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

// fleetSettled waits until the fleet stream holds want messages and every
// hub notifier consumer has acked them all.
func fleetSettled(t *testing.T, js jetstream.JetStream, timeout time.Duration, want uint64) {
	harness.Eventually(t, timeout, "the hub notifier's consumers to ack the fleet stream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, fleetStream)
		if err != nil {
			return false
		}
		si, err := st.Info(ctx)
		if err != nil || si.State.Msgs != want {
			return false
		}
		for _, r := range []string{"all-feishu", "b-feishu", "late-feishu"} {
			c, err := js.Consumer(ctx, fleetStream, "opswire-notifier-hub-"+r)
			if err != nil {
				return false
			}
			info, err := c.Info(ctx)
			if err != nil || info.NumPending != 0 || info.NumAckPending != 0 || info.AckFloor.Stream != si.State.LastSeq {
				return false
			}
		}
		return true
	})
}

// cardsByCluster sorts cards by the cluster their title and footer name; a
// card naming no cluster, two, or different ones in title and footer fails.
func cardsByCluster(t *testing.T, cards []*feishutest.Card) map[string][]*feishutest.Card {
	t.Helper()
	out := map[string][]*feishutest.Card{}
	for _, card := range cards {
		var named []string
		for c := range fleetEvents {
			if strings.HasSuffix(card.Title(), " · cluster "+c) && strings.Contains(card.Text(), "opswire · cluster "+c+" ·") {
				named = append(named, c)
			}
			other := "team-" + c
			for o := range fleetEvents {
				if o != c && strings.HasSuffix(card.Title(), " · cluster "+o) && strings.Contains(card.Text(), other) {
					t.Errorf("card of cluster %s lists %s's namespace %s:\n%s", o, c, other, card.Text())
				}
			}
		}
		if len(named) != 1 {
			t.Errorf("card names clusters %v, want exactly one:\n%s", named, card.Text())
			continue
		}
		out[named[0]] = append(out[named[0]], card)
	}
	return out
}

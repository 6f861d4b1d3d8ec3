package dispatch_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/route"
	"github.com/opswire/opswire/services/notifier/internal/service"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// fleetStream stands for a hub's fleet-wide stream: it sources each
// cluster's stream, as in a deployment.
const fleetStream = "FLEET"

// TestFleetCardsPerCluster: a fleet notifier (notifier.clusters ["*"],
// notifier.stream FLEET) reading the same decisions (same ce-ids, as two
// clusters' report ticks or reused ids would have) from clusters a and b
// sends one card per cluster naming it, never a mixed one; a route with
// clusters [b] gets only b's; outcomes, delivered ids and dead letters are
// per cluster (dead letters of sourced messages, which carry
// Nats-Stream-Source, are stored); a replay of one cluster leaves the
// other's dead letters.
func TestFleetCardsPerCluster(t *testing.T) {
	nc, js := natstest.Connect(t)
	ctx := context.Background()
	for _, c := range []string{"a", "b"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS_" + c, Subjects: []string{"ops." + c + ".>"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: fleetStream, Duplicates: time.Minute,
		Sources: []*jetstream.StreamSource{{Name: "OPS_a"}, {Name: "OPS_b"}}}); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.EnsureDeadLetterStream(ctx, js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := notifierConfig()
	n.Stream, n.Clusters = fleetStream, []string{config.AllClusters}
	cc := service.ConsumerConfig("hub", "fleet", n)
	if cc.FilterSubject != "ops.*.>" || cc.Durable != "opswire-notifier-hub-fleet" {
		t.Fatalf("consumer %q filter %q", cc.Durable, cc.FilterSubject)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, fleetStream, cc)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	outcomes := map[string][]dispatch.Outcome{} // by subject
	sub, err := nc.Subscribe("notify.>", func(m *nats.Msg) {
		var o dispatch.Outcome
		_ = json.Unmarshal(m.Data, &o)
		mu.Lock()
		outcomes[m.Subject] = append(outcomes[m.Subject], o)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	srv := feishutest.NewServer()
	t.Cleanup(srv.Close)
	allURL := srv.AddBot("tok-all", feishutest.Bot{})
	bURL := srv.AddBot("tok-b", feishutest.Bot{})
	badURL := srv.AddBot("tok-bad", feishutest.Bot{Secret: "right"})
	bOnly := fastRoute("b-only", "b-bot")
	bOnly.Clusters = []string{"b"}
	bOnly.Continue = true
	routes := []config.Route{bOnly, fastRoute("all", "all-bot", "bad-bot")}
	receivers := []dispatch.Receiver{feishuReceiver(t, "all-bot", allURL, "", ""), feishuReceiver(t, "b-bot", bURL, "", ""),
		feishuReceiver(t, "bad-bot", badURL, "wrong", "")}
	records, err := dispatch.NewAsyncRecorder(nc, 64, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	d := dispatch.New(dispatch.Settings{Cluster: "hub", Fleet: true, RetryInitial: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
		GiveUpAfter: time.Minute, AckWait: n.AckWait.Duration, MaxDeliver: n.MaxDeliver, Lookups: 8, LookupBatch: 4}, dispatch.Deps{
		Routes: route.New(routes, nil, config.D(0), config.D(0)), Receivers: receivers,
		Delivered: &dispatch.KVDelivered{KV: kv, Async: records, StatesBatch: 3},
		DeadJS:    js, Core: nc, Metrics: dispatch.NewMetrics(prometheus.NewRegistry()),
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(rctx) }()
	consume, err := cons.Consume(func(m jetstream.Msg) { d.Handle(rctx, m) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consume.Stop(); cancel(); <-done })

	// The same three decisions (same ids, pods, namespace) in each cluster.
	for _, cl := range []string{"a", "b"} {
		for _, pod := range []string{"p1", "p2", "p3"} {
			ev, err := envelope.New("cleanup/uid-"+pod+"/deleted", envelope.Source(cl, "cleanup"), events.TypeCleanup, "ns/"+pod,
				events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: pod, PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			m := ev.Msg(subject.Ops(cl, "cleanup", "deleted", "ns", pod))
			// A stream deduplicates equal ids, across its sources too; the
			// notifier must not conflate them.
			m.Header.Del(nats.MsgIdHdr)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.Eventually(t, 10*time.Second, "every message acked", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == 6
	})

	byCluster := func(token string) map[string]int {
		out := map[string]int{}
		for _, c := range srv.Cards(token) {
			text := c.Text()
			if !strings.Contains(text, "**3** cleanup results") {
				t.Errorf("%s card does not account for 3 events:\n%s", token, text)
			}
			for _, cl := range []string{"a", "b"} {
				if strings.HasSuffix(c.Title(), " · cluster "+cl) && strings.Contains(text, "opswire · cluster "+cl+" ·") {
					out[cl]++
				}
			}
		}
		if len(srv.Cards(token)) != out["a"]+out["b"] {
			t.Errorf("%s: %d cards, %v name exactly one cluster in title and footer", token, len(srv.Cards(token)), out)
		}
		return out
	}
	if got := byCluster("tok-all"); got["a"] != 1 || got["b"] != 1 {
		t.Errorf("route all: cards per cluster %v, want one each", got)
	}
	if got := byCluster("tok-b"); got["a"] != 0 || got["b"] != 1 {
		t.Errorf("route clusters [b]: cards per cluster %v, want only b's", got)
	}
	for _, cl := range []string{"a", "b"} {
		rec, err := (&dispatch.KVDelivered{KV: kv}).State(ctx, dispatch.DeliveredKey(cl, "all", "all-bot", "cleanup/uid-p1/deleted"))
		if err != nil || rec != dispatch.RecordDelivered {
			t.Errorf("cluster %s: record %q (%v), want delivered", cl, rec, err)
		}
	}
	mu.Lock()
	for _, cl := range []string{"a", "b"} {
		os := outcomes[subject.Notify(cl, "all-bot", dispatch.OutcomeDelivered)]
		if len(os) != 1 || os[0].Cluster != cl || os[0].Events != 3 {
			t.Errorf("outcomes of %s on all-bot: %+v, want one naming it", cl, os)
		}
	}
	if os := outcomes[subject.Notify("a", "b-bot", dispatch.OutcomeDelivered)]; len(os) != 0 {
		t.Errorf("b-bot got a's events: %+v", os)
	}
	mu.Unlock()

	// bad-bot's wrong secret dead-lettered each cluster's events on its own subject.
	dlq, err := js.Stream(ctx, dispatch.DeadLetterStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := dlq.Info(ctx, jetstream.WithSubjectFilter("dlq.>"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := info.State.Subjects["dlq.a.notifier.bad-bot"], info.State.Subjects["dlq.b.notifier.bad-bot"]; a != 3 || b != 3 {
		t.Fatalf("dead letters per subject %v, want 3 for each cluster", info.State.Subjects)
	}
	// Replaying a's (still wrong secret: nothing lost) and then b's.
	dl := dispatch.StreamDeadLetters{JS: js}
	if res := d.ReplayCluster(ctx, dl, "bad-bot", "a"); res.Cluster != "a" || res.DeadLetters != 3 || res.Events != 3 || res.Failed != 3 {
		t.Errorf("replay of a = %+v, want 3 read, 3 failed again", res)
	}
	if res := d.ReplayCluster(ctx, dl, "bad-bot", "b"); res.Cluster != "b" || res.DeadLetters != 3 || res.Events != 3 {
		t.Errorf("replay of b = %+v, want b's 3 only", res)
	}
}

// TestFleetConsumerFilters: the consumer's filter and the replay subjects
// per notifier.clusters, each accepted by a real server.
func TestFleetConsumerFilters(t *testing.T) {
	_, js := natstest.Connect(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: fleetStream, Subjects: []string{"ops.>"}}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		clusters []string
		filter   string
		filters  []string
		replay   []string
	}{
		{"own cluster", nil, "ops.hub.>", nil, []string{"ctl.hub.notifier.replay"}},
		{"every cluster", []string{"*"}, "ops.*.>", nil, []string{"ctl.*.notifier.replay"}},
		{"one listed", []string{"a"}, "ops.a.>", nil, []string{"ctl.a.notifier.replay"}},
		{"two listed", []string{"a", "b"}, "", []string{"ops.a.>", "ops.b.>"}, []string{"ctl.a.notifier.replay", "ctl.b.notifier.replay"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := notifierConfig()
			n.Stream, n.Clusters = fleetStream, tc.clusters
			cc := service.ConsumerConfig("hub", "r", n)
			if cc.FilterSubject != tc.filter || strings.Join(cc.FilterSubjects, " ") != strings.Join(tc.filters, " ") {
				t.Errorf("filter %q %v, want %q %v", cc.FilterSubject, cc.FilterSubjects, tc.filter, tc.filters)
			}
			if got := service.ReplaySubjects("hub", n); strings.Join(got, " ") != strings.Join(tc.replay, " ") {
				t.Errorf("replay subjects %v, want %v", got, tc.replay)
			}
			if _, err := js.CreateOrUpdateConsumer(context.Background(), fleetStream, cc); err != nil {
				t.Errorf("server rejects the consumer: %v", err)
			}
		})
	}
}

// TestFleetForeignSourceTerminated: a message stored under ops.b.> through
// the source filtered to ops.a.> (here by a subject transform on the source,
// standing for a's side handing the hub another cluster's subject,
// docs/fleet.md#trust) is terminated, logged and counted, and never becomes
// a card or an outcome for b; b's own message with the same id is delivered.
func TestFleetForeignSourceTerminated(t *testing.T) {
	nc, js := natstest.Connect(t)
	ctx := context.Background()
	for _, c := range []string{"a", "b"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS_" + c, Subjects: []string{"ops." + c + ".>"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: fleetStream, Sources: []*jetstream.StreamSource{
		{Name: "OPS_a", SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: "ops.a.>", Destination: "ops.b.>"}}},
		{Name: "OPS_b", FilterSubject: "ops.b.>"}}}); err != nil {
		t.Fatal(err)
	}
	if err := dispatch.EnsureDeadLetterStream(ctx, js, time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := notifierConfig()
	n.Stream, n.Clusters = fleetStream, []string{config.AllClusters}
	cons, err := js.CreateOrUpdateConsumer(ctx, fleetStream, service.ConsumerConfig("hub", "fleet", n))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var outcomes []dispatch.Outcome
	sub, err := nc.Subscribe("notify.>", func(m *nats.Msg) {
		var o dispatch.Outcome
		_ = json.Unmarshal(m.Data, &o)
		mu.Lock()
		outcomes = append(outcomes, o)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	srv := feishutest.NewServer()
	t.Cleanup(srv.Close)
	url := srv.AddBot("tok", feishutest.Bot{})
	metrics := dispatch.NewMetrics(prometheus.NewRegistry())
	d := dispatch.New(dispatch.Settings{Cluster: "hub", Fleet: true, Consumer: "fleet", RetryInitial: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
		GiveUpAfter: time.Minute, AckWait: n.AckWait.Duration, MaxDeliver: n.MaxDeliver}, dispatch.Deps{
		Routes: route.New([]config.Route{fastRoute("all", "bot")}, nil, config.D(0), config.D(0)), Receivers: []dispatch.Receiver{feishuReceiver(t, "bot", url, "", "")},
		Delivered: &dispatch.KVDelivered{KV: kv}, DeadJS: js, Core: nc, Metrics: metrics,
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(rctx) }()
	consume, err := cons.Consume(func(m jetstream.Msg) { d.Handle(rctx, m) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consume.Stop(); cancel(); <-done })

	for _, c := range []struct{ cluster, pod string }{{"a", "forged"}, {"b", "real"}} {
		ev, err := envelope.New("cleanup/uid/deleted", envelope.Source("b", "cleanup"), events.TypeCleanup, "ns/"+c.pod,
			events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: c.pod, PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, ev.Msg(subject.Ops(c.cluster, "cleanup", "deleted", "ns", c.pod))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, "both messages settled", func() bool {
		ci, err := cons.Info(ctx)
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.AckFloor.Stream == 2
	})
	testkit.Eventually(t, 10*time.Second, "b's card", func() bool { return len(srv.Cards("tok")) >= 1 })
	if got := value(metrics.Messages.WithLabelValues("fleet", "foreign_source")); got != 1 {
		t.Errorf("foreign_source = %v, want 1", got)
	}
	cards := srv.Cards("tok")
	if len(cards) != 1 || !strings.Contains(cards[0].Text(), "real") || strings.Contains(cards[0].Text(), "forged") {
		for _, c := range cards {
			t.Logf("card: %s\n%s", c.Title(), c.Text())
		}
		t.Fatalf("%d cards, want one with b's real pod only", len(cards))
	}
	testkit.Eventually(t, 10*time.Second, "b's outcome", func() bool { mu.Lock(); defer mu.Unlock(); return len(outcomes) >= 1 })
	mu.Lock()
	defer mu.Unlock()
	if len(outcomes) != 1 || outcomes[0].Cluster != "b" || outcomes[0].Events != 1 {
		t.Errorf("outcomes %+v, want b's one delivery of 1 event", outcomes)
	}
}

func TestForeignSource(t *testing.T) {
	for _, c := range []struct {
		subj, hdr string
		foreign   bool
	}{
		{"ops.b.cleanup.deleted.shop.x", "OPS:abc 7 ops.a.> > ops.b.cleanup.deleted.shop.x", true},
		{"ops.a.cleanup.deleted.shop.x", "OPS:abc 7 ops.a.> > ops.a.cleanup.deleted.shop.x", false},
		{"ops.a", "OPS:abc 7 ops.a.> > ops.a", true}, // ">" needs a token
		{"ops.ab.x", "OPS 7 ops.a.> > ops.ab.x hub", true},
		{"ops.b.x", "", false},                  // not sourced
		{"ops.b.x", "OPS 7", false},             // older form, no filter
		{"ops.b.x", "OPS 7 > > ops.b.x", false}, // unfiltered source
	} {
		h := nats.Header{}
		if c.hdr != "" {
			h.Set(dispatch.StreamSourceHeader, c.hdr)
		}
		if _, got := dispatch.ForeignSource(c.subj, h); got != c.foreign {
			t.Errorf("ForeignSource(%q, %q) = %v, want %v", c.subj, c.hdr, got, c.foreign)
		}
	}
}

// TestForeignSourceJudgesEveryHeaderValue: nats-server removes a received
// Nats-Stream-Source only where the key follows "\r\n", and nats.go splits
// header lines on a bare "\n", so a cluster's side can smuggle a value that
// claims another cluster's filter in front of the one the hub writes. Every
// value counts, whatever the key's case, and more than one is foreign: the
// sourcing server writes exactly one.
func TestForeignSourceJudgesEveryHeaderValue(t *testing.T) {
	const subj = "ops.b.cleanup.deleted.shop.x"
	smuggled := "OPS:b 1 ops.b.> > " + subj
	hubs := "OPS:a 7 ops.a.> > " + subj
	tests := []struct {
		name    string
		header  func(t *testing.T) nats.Header
		foreign bool
	}{
		{"smuggled through a bare newline, the hub's own value second", func(t *testing.T) nats.Header {
			h, err := nats.DecodeHeadersMsg([]byte("NATS/1.0\r\nX-Opswire-Test: 1\nNats-Stream-Source: " + smuggled + "\r\n" +
				"Nats-Stream-Source: " + hubs + "\r\n\r\n"))
			if err != nil {
				t.Fatal(err)
			}
			return h
		}, true},
		{"two values under one key, both matching", func(*testing.T) nats.Header {
			return nats.Header{dispatch.StreamSourceHeader: {smuggled, smuggled}}
		}, true},
		{"a lower-case key beside the canonical one", func(*testing.T) nats.Header {
			return nats.Header{"nats-stream-source": {smuggled}, dispatch.StreamSourceHeader: {"OPS:b 3 ops.b.> > " + subj}}
		}, true},
		{"only a lower-case key, outside its filter", func(*testing.T) nats.Header {
			return nats.Header{"NATS-STREAM-SOURCE": {hubs}}
		}, true},
		{"one value inside its filter", func(*testing.T) nats.Header {
			return nats.Header{dispatch.StreamSourceHeader: {smuggled}}
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.header(t)
			if _, got := dispatch.ForeignSource(subj, h); got != tc.foreign {
				t.Errorf("ForeignSource(%q, %v) = %v, want %v", subj, h, got, tc.foreign)
			}
		})
	}
}

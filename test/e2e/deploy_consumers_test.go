package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/test/harness"
)

// kubeConsumer is one consumer on KUBE as the server holds it.
type kubeConsumer struct {
	name    string
	filters []string
	owner   string // the test's own consumers; "" for the services'
}

// deployKubeConsumerIsolation: each actor keeps to its own KUBE consumers
// (docs/security.md, "Consumers"). Each actor user makes an ordered consumer
// the way its service does (nats.go's OrderedConsumer, which these
// permissions must allow); then, with the real names of those and of the
// running services' consumers in hand (from the server, not from NATS),
// every other actor is refused deleting them, asking their state, and
// re-creating them with another filter; no user can learn a name (consumer
// lists, advisories, $SYS), and the answers they may get carry none; and
// every consumer is left as it was. What an actor can still do with a
// leaked name (pull from it) is the residual risk the document names.
func deployKubeConsumerIsolation(t *testing.T, n *harness.NATS, pw map[string]string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	filters := map[string][]string{ // as the services filter (kubestate.New's kinds, the watcher's seed)
		"watcher": {"kube.default.>"},
		"cordon":  {"kube.default.node.>"},
		"cleanup": {"kube.default.>"}, // a mirror of every kind has one filter (kubestate's kubeFilters)
		"report":  {"kube.default.>"},
	}
	actors := []string{"watcher", "cordon", "cleanup", "report"}
	var own []kubeConsumer
	for _, a := range actors {
		u := connectAs(t, n, a, pw[a])
		js, err := jetstream.New(u.nc)
		if err != nil {
			t.Fatal(err)
		}
		c, err := js.OrderedConsumer(ctx, "KUBE", jetstream.OrderedConsumerConfig{
			FilterSubjects: filters[a], DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		})
		if err != nil {
			t.Fatalf("%s creates its ordered consumer on KUBE: %v", a, err)
		}
		info := c.CachedInfo()
		own = append(own, kubeConsumer{name: info.Name, filters: filters[a], owner: a})
	}
	before := kubeConsumers(t, n)
	for _, c := range own {
		if _, ok := before[c.name]; !ok {
			t.Fatalf("the server has no consumer %s (%s's)", c.name, c.owner)
		}
	}
	var services []string
	for name := range before {
		if !slices.ContainsFunc(own, func(c kubeConsumer) bool { return c.name == name }) {
			services = append(services, name)
		}
	}
	if len(services) < 3 { // cordon's, cleanup's and report's mirrors at least
		t.Fatalf("%d service consumers on KUBE (%v), want the three actors' mirrors", len(services), services)
	}
	t.Logf("%d KUBE consumers: the test's %d and the services' %v", len(before), len(own), services)

	type attempt struct {
		user, subject string
		subscribe     bool
	}
	var cases []attempt
	pub := func(user string, subjects ...string) {
		for _, s := range subjects {
			cases = append(cases, attempt{user: user, subject: s})
		}
	}
	for _, a := range actors {
		for _, c := range own {
			if c.owner == a {
				continue
			}
			pub(a, "$JS.API.CONSUMER.DELETE.KUBE."+c.name)
			if a != "watcher" { // the watcher's seed reads its consumer's state
				pub(a, "$JS.API.CONSUMER.INFO.KUBE."+c.name)
			}
			// Re-created (an update) under a filter form this actor may not use.
			switch a {
			case "cordon":
				pub(a, "$JS.API.CONSUMER.CREATE.KUBE."+c.name, "$JS.API.CONSUMER.CREATE.KUBE."+c.name+".kube.default.pod.>")
			case "watcher":
				pub(a, "$JS.API.CONSUMER.CREATE.KUBE."+c.name)
			}
			// cleanup and report: one filter under kube.*.>, and for one
			// release the form without a filter (the upgrade), so any
			// filter: the residual risk docs/security.md names.
		}
		for _, name := range services {
			pub(a, "$JS.API.CONSUMER.DELETE.KUBE."+name)
		}
	}
	for _, name := range append(services, own[0].name) {
		pub("audit", "$JS.API.CONSUMER.INFO.KUBE."+name, "$JS.API.CONSUMER.DELETE.KUBE."+name,
			"$JS.API.CONSUMER.MSG.NEXT.KUBE."+name, "$JS.API.CONSUMER.CREATE.KUBE."+name)
	}
	// No way to learn a name: lists, advisories (they carry the names), the system account.
	for _, u := range append(actors, "audit", "notifier") {
		pub(u, "$JS.API.CONSUMER.NAMES.KUBE", "$JS.API.CONSUMER.LIST.KUBE")
		for _, s := range []string{"$JS.EVENT.>", "$JS.EVENT.ADVISORY.CONSUMER.CREATED.KUBE.*", "$JS.EVENT.ADVISORY.>", "$SYS.>"} {
			cases = append(cases, attempt{user: u, subject: s, subscribe: true})
		}
	}
	for _, tc := range cases {
		verb := "publish"
		if tc.subscribe {
			verb = "subscribe"
		}
		t.Run(fmt.Sprintf("%s cannot %s %s", tc.user, verb, tc.subject), func(t *testing.T) {
			u := connectAs(t, n, tc.user, pw[tc.user])
			var err error
			if tc.subscribe {
				_, err = u.nc.SubscribeSync(tc.subject)
			} else {
				err = u.nc.PublishRequest(tc.subject, u.nc.NewInbox(), []byte(`{"stream_name":"KUBE","config":{"filter_subject":"kube.default.node.>"}}`))
			}
			if err == nil {
				err = u.nc.Flush()
			}
			if err != nil {
				t.Fatal(err)
			}
			u.violation(t, tc.subject)
		})
	}
	// The answers each user may get name no consumer.
	answers := map[string][]string{"$JS.API.STREAM.INFO.KUBE": append(actors, "audit"), "$JS.API.INFO": {"report", "audit"}}
	for subj, users := range answers {
		for _, u := range users {
			c := connectAs(t, n, u, pw[u])
			m, err := c.nc.Request(subj, []byte(`{"subjects_filter":">"}`), 5*time.Second)
			if err != nil {
				t.Fatalf("%s requests %s: %v", u, subj, err)
			}
			for name := range before {
				// The random part, whatever the serial.
				if key, _, _ := strings.Cut(name, "_"); strings.Contains(string(m.Data), key) {
					t.Errorf("%s's answer on %s names the consumer %s", u, subj, name)
				}
			}
		}
	}
	// Every consumer is still there, with its filter, and nothing was
	// delivered from the test's own (nobody pulled).
	after := kubeConsumers(t, n)
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			t.Errorf("consumer %s is gone", name)
			continue
		}
		if !slices.Equal(consumerFilters(b), consumerFilters(a)) {
			t.Errorf("consumer %s: filters %v became %v", name, consumerFilters(b), consumerFilters(a))
		}
	}
	for _, c := range own {
		if a := after[c.name]; a != nil && a.Delivered.Consumer != 0 {
			t.Errorf("%s's consumer %s delivered %d messages: somebody pulled", c.owner, c.name, a.Delivered.Consumer)
		}
	}
	t.Logf("%d refusals; %d KUBE consumers unchanged", len(cases), len(before))
}

// kubeConsumers are the consumers of KUBE, by name, read from the server itself.
func kubeConsumers(t *testing.T, n *harness.NATS) map[string]*natsserver.ConsumerInfo {
	t.Helper()
	jz, err := n.Server().Jsz(&natsserver.JSzOptions{Accounts: true, Streams: true, Consumer: true, DirectConsumer: true, Config: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*natsserver.ConsumerInfo{}
	for _, a := range jz.AccountDetails {
		for _, s := range a.Streams {
			if s.Name != "KUBE" {
				continue
			}
			for _, c := range append(s.Consumer, s.DirectConsumer...) {
				out[c.Name] = c
			}
		}
	}
	return out
}

func consumerFilters(c *natsserver.ConsumerInfo) []string {
	if c.Config == nil {
		return nil
	}
	f := append([]string(nil), c.Config.FilterSubjects...)
	if c.Config.FilterSubject != "" {
		f = append(f, c.Config.FilterSubject)
	}
	slices.Sort(f)
	return f
}

// TestDeployKubeConsumerStolenPull measures the residual risk the consumer
// rules leave (docs/security.md): an actor that has learnt another's KUBE
// consumer name (the rules give it no way to) may pull from it. On a real
// server with deploy/'s users, cleanup steals the first 20 of 50 node states
// from cordon's ordered consumer before cordon pulls; cordon's ordered
// consumer sees the gap, resets, and still receives all 50, in order, once.
func TestDeployKubeConsumerStolenPull(t *testing.T) {
	const total, stolen = 50, 20
	n, pw := harness.StartDeployedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := connectAs(t, n, "watcher", pw["watcher"])
	wjs, err := jetstream.New(w.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wjs.CreateStream(ctx, natsx.KubeStreamConfig(config.NATS{Replicas: 1})); err != nil {
		t.Fatalf("the watcher creates KUBE: %v", err)
	}
	for i := range total {
		if _, err := wjs.Publish(ctx, fmt.Sprintf("kube.default.node.steal-%02d", i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}

	// cordon's ordered consumer, as its mirror makes it (nodes only).
	c := connectAs(t, n, "cordon", pw["cordon"])
	cjs, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	victim, err := cjs.OrderedConsumer(ctx, "KUBE", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"kube.default.node.>"}})
	if err != nil {
		t.Fatal(err)
	}
	name := victim.CachedInfo().Name

	// cleanup, given the name, pulls 20 messages from it: allowed (MSG.NEXT.KUBE.*).
	thief := connectAs(t, n, "cleanup", pw["cleanup"])
	inbox := thief.nc.NewInbox()
	sub, err := thief.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	req := fmt.Sprintf(`{"batch":%d,"expires":%d}`, stolen, (5 * time.Second).Nanoseconds())
	if err := thief.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.KUBE."+name, inbox, []byte(req)); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < stolen {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("the thief got %d of %d messages: %v", got, stolen, err)
		}
		if strings.HasPrefix(m.Subject, "kube.default.node.") {
			got++
		}
	}
	t.Logf("cleanup pulled %d messages from cordon's consumer %s", got, name)

	// The victim still gets everything, in stream order, once.
	it, err := victim.Messages()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Stop()
	start := time.Now()
	seen := map[string]int{}
	var last uint64
	for len(seen) < total {
		m, err := it.Next()
		if err != nil {
			t.Fatalf("cordon's consumer after %d subjects: %v", len(seen), err)
		}
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if md.Sequence.Stream <= last {
			t.Fatalf("stream sequence %d after %d: out of order or repeated", md.Sequence.Stream, last)
		}
		last = md.Sequence.Stream
		seen[m.Subject()]++
		if time.Since(start) > 30*time.Second {
			t.Fatalf("cordon's consumer has %d of %d subjects after 30 s", len(seen), total)
		}
	}
	now := victim.CachedInfo().Name
	if now == name {
		t.Errorf("cordon's consumer %s never reset after the theft", name)
	}
	t.Logf("cordon's ordered consumer reset (%s → %s) and received all %d messages in order, once each, %v after it started pulling",
		name, now, total, time.Since(start).Round(time.Millisecond))
}

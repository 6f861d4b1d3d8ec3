package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/testport"
	"github.com/opswire/opswire/test/harness"
)

// fleet is a running fleet: the hub's nats-server and notifier, and per
// cluster a control plane, an edge nats-server (its leaf link to the hub
// through a cuttable proxy), the watcher and cleanup.
type fleet struct {
	certs, caFile string
	pw            map[string]string
	hub           *harness.NATSServer
	hubURL        string
	hubLeaf       string // host:port of the hub's leaf-node listener
	audit         *nats.Conn
	auditJS       jetstream.JetStream
	bot           *feishutest.Server
	notifier      *harness.Process
	edges         map[string]*fleetEdge
}

type fleetEdge struct {
	cluster  string
	cp       *harness.ControlPlane
	api      *harness.APIProxy
	nats     *harness.NATSServer
	url      string
	link     *tcpProxy
	watcher  *harness.Process
	cleanup  *harness.Process
	auditJS  jetstream.JetStream
	auditCon *nats.Conn
}

const fleetBot = "fleet-bot-5e21"

// fleetEdgeOverrides are the test's settings on the deployed config.yml of
// an edge: one server (one replica), quick intervals.
const fleetEdgeOverrides = `
nats: {replicas: 1}
controller: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 200ms}
delException: {interval: 2s, minAge: 0s}
autoCordon: {enable: false}
sendReport: {enable: false}
imageAlert: {enable: false}
`

// fleetHubOverrides: one server; quick grouping. The fleet OPS has no
// Nats-Msg-Id deduplication at all (natsx.OpsStreamConfig), so a message
// sourced twice would be stored twice and seen (nats.duplicates, kept at
// 2 s here, does not apply to it).
const fleetHubOverrides = `
nats: {replicas: 1, duplicates: 2s}
controller: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 200ms}
sendReport: {enable: false}
notifier: {groupWait: 300ms, groupInterval: 1s, retryInitial: 100ms, ackWait: 5s, requestTimeout: 3s}
`

func overrideConfig(t *testing.T, deployed, over string) string {
	t.Helper()
	var doc, o map[string]any
	if err := yaml.Unmarshal([]byte(deployed), &doc); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(over), &o); err != nil {
		t.Fatal(err)
	}
	deepMerge(doc, o)
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return harness.WriteConfig(t, string(out))
}

func renderedConfig(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	cm := harness.FindByPrefix(objs, "ConfigMap", "opswire-config-")
	if cm == nil {
		t.Fatal("ConfigMap opswire-config missing")
	}
	s, _, _ := unstructured.NestedString(cm.Object, "data", "config.yml")
	return s
}

// startFleet starts the hub, then each cluster's control plane, edge NATS,
// watcher and cleanup, from the fleet-hub and fleet-edge overlays.
func startFleet(t *testing.T) *fleet {
	t.Helper()
	f := &fleet{certs: makeCerts(t, "IP:127.0.0.1,DNS:localhost"), pw: fleetPasswords(), edges: map[string]*fleetEdge{}}
	f.caFile = filepath.Join(f.certs, "ca.crt")
	hubObjs := harness.KustomizeBuild(t, deployPath(t, "overlays", "fleet-hub"))
	edgeObjs := harness.KustomizeBuild(t, deployPath(t, "overlays", "fleet-edge"))

	// The hub.
	ports := map[string]int{"client": testport.Must(t), "http": testport.Must(t), "leafnodes": testport.Must(t)}
	f.hubURL = "nats://127.0.0.1:" + strconv.Itoa(ports["client"])
	f.hubLeaf = "127.0.0.1:" + strconv.Itoa(ports["leafnodes"])
	f.hub = harness.StartNATSServer(t, "hub", natsConfFiles(t, hubObjs, f.certs, ports), stsEnv(t, hubObjs, natsEnvPasswords(f.pw)))
	f.audit = connectUser(t, f.hubURL, f.caFile, "audit", f.pw["audit"])
	f.auditJS = jetStream(t, f.audit)

	// Each cluster's edge: its own control plane and NATS, the leaf link to
	// the hub through a proxy the test can cut.
	edgeCfg := overrideConfig(t, renderedConfig(t, edgeObjs), fleetEdgeOverrides)
	for _, c := range fleetClusters {
		e := &fleetEdge{cluster: c}
		tc := harness.Prefixed(t, c)
		e.cp = harness.StartControlPlane(tc)
		harness.CreateNamespace(t, e.cp.Client, "opswire")
		harness.CreateNamespace(t, e.cp.Client, "shop")
		harness.CreateNode(t, e.cp.Client, harness.Node("node-"+c, nil))
		e.api = harness.StartAPIProxy(t, e.cp)
		e.link = startTCPProxy(t, f.hubLeaf)
		ports := map[string]int{"client": testport.Must(t), "http": testport.Must(t)}
		e.url = "nats://127.0.0.1:" + strconv.Itoa(ports["client"])
		vals := natsEnvPasswords(harness.DeployPasswords())
		vals["OPSWIRE_CLUSTER"], vals["NATS_HUB"], vals["NATS_LEAF_PASSWORD"] = c, e.link.Addr(), f.pw["leaf_"+c]
		e.nats = harness.StartNATSServer(t, "edge-"+c, natsConfFiles(t, edgeObjs, f.certs, ports), stsEnv(t, edgeObjs, vals))
		e.auditCon = connectUser(t, e.url, f.caFile, "audit", f.pw["audit"])
		e.auditJS = jetStream(t, e.auditCon)
		for _, svc := range []string{"watcher", "cleanup"} {
			env := append(harness.DeploymentEnv(t, edgeObjs, "opswire-"+svc), "OPSWIRE_NATS_TLS_CA="+f.caFile,
				"OPSWIRE_NATS_PASSWORD="+f.pw[svc], "OPSWIRE_CLUSTER="+c) // OPSWIRE_CLUSTER: the ConfigMap opswire-fleet's value
			p := harness.StartService(tc, svc, harness.ServiceOptions{Config: edgeCfg, NATSURL: e.url, Env: env,
				Kubeconfig: e.api.Kubeconfig(t, e.cp.Kubeconfig), ID: svc + "-" + c})
			if svc == "watcher" {
				e.watcher = p
			} else {
				e.cleanup = p
			}
		}
		f.edges[c] = e
	}
	for _, c := range fleetClusters {
		f.edges[c].watcher.WaitReady(t, 60*time.Second)
		f.edges[c].cleanup.WaitReady(t, 60*time.Second)
	}

	// The hub's notifier, with the fleet-hub Deployment's settings; it
	// creates the fleet OPS with a source per cluster.
	f.bot = feishutest.NewServer()
	t.Cleanup(f.bot.Close)
	botURL := f.bot.AddBot(fleetBot, feishutest.Bot{Secret: "fleet-secret-7d"})
	hubCfg := overrideConfig(t, renderedConfig(t, hubObjs), fleetHubOverrides)
	env := append(harness.DeploymentEnv(t, hubObjs, "opswire-notifier"), "OPSWIRE_NATS_TLS_CA="+f.caFile,
		"OPSWIRE_NATS_PASSWORD="+f.pw["notifier"], "OPSWIRE_FEISHU_URL="+botURL, "OPSWIRE_FEISHU_SECRET=fleet-secret-7d")
	// One fleet notifier (the hub config's notifier.clusters) reads every
	// cluster from the fleet OPS.
	f.notifier = harness.StartService(t, "notifier", harness.ServiceOptions{Config: hubCfg, NATSURL: f.hubURL, Env: env, ID: "hub"})
	f.notifier.WaitReady(t, 60*time.Second)
	return f
}

// notifierEvents is the number of events the hub's notifier delivered.
func (f *fleet) notifierEvents() float64 {
	return f.notifier.Metric(`opswire_notifier_events_total{outcome="delivered",receiver="feishu"}`)
}

func (f *fleet) cardTexts() []string {
	var out []string
	for _, c := range f.bot.Cards(fleetBot) {
		out = append(out, c.Text())
	}
	return out
}

// evictPods creates and evicts pods prefix-00.. on the cluster's node.
func (e *fleetEdge) evictPods(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		evict(t, e.cp, harness.CreatePod(t, e.cp.Client, harness.Pod("shop", name, "node-"+e.cluster)))
		names = append(names, name)
	}
	return names
}

// TestFleetTwoClusters: two clusters, each with its own control plane, edge
// NATS (the fleet-edge overlay's nats.conf, JetStream domain <cluster>,
// a leaf node of the hub), watcher and cleanup; one hub (the fleet-hub
// overlay's nats.conf and auth.conf, real nats-server processes) with the
// notifier and a Feishu test bot. An evicted pod in each cluster becomes
// one card per cluster naming it; the hub's fleet OPS holds both decisions;
// cluster a's credentials (its leaf user, from a rogue leaf server) are
// refused b's subjects and the hub's JetStream, and what a forges under
// ops.b.> in its own OPS never reaches the fleet OPS; a's decision carrying
// b's next id does not suppress b's (fleetIDTheft); and what a raw leaf as
// leaf-a gets stored under ops.b.> through a's source, with or without a
// smuggled Nats-Stream-Source header, never becomes a card or an outcome
// (fleetForgedSource).
func TestFleetTwoClusters(t *testing.T) {
	f := startFleet(t)
	start := time.Now()
	pods := map[string][]string{}
	for _, c := range fleetClusters {
		pods[c] = f.edges[c].evictPods(t, "ev-"+c, 2)
	}
	// Both decisions of each cluster in the fleet OPS, once each.
	harness.Eventually(t, 60*time.Second, "every deletion in the hub's fleet OPS", func() bool {
		return len(streamSubjects(t, f.auditJS, "OPS", "ops.*.cleanup.deleted.>")) == 4
	})
	fleetOps := streamSubjects(t, f.auditJS, "OPS", "ops.>")
	for _, c := range fleetClusters {
		for _, p := range pods[c] {
			if n := fleetOps["ops."+c+".cleanup.deleted.shop."+p]; n != 1 {
				t.Errorf("fleet OPS holds %s's deletion of %s %d times, want 1", c, p, n)
			}
		}
	}
	t.Logf("4 evictions in 2 clusters in the hub's fleet OPS %v after the evictions", time.Since(start).Round(time.Millisecond))
	// Sizing figures (docs/fleet.md): bytes per stored message of an edge's
	// KUBE and of the fleet OPS.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range []struct {
		where, stream string
		js            jetstream.JetStream
	}{{"edge a", "KUBE", f.edges["a"].auditJS}, {"edge a", "OPS", f.edges["a"].auditJS}, {"hub", "OPS", f.auditJS}} {
		if st, err := x.js.Stream(ctx, x.stream); err == nil && st.CachedInfo().State.Msgs > 0 {
			s := st.CachedInfo().State
			t.Logf("%s %s: %d messages, %d bytes, %d bytes each", x.where, x.stream, s.Msgs, s.Bytes, s.Bytes/s.Msgs)
		}
	}
	// One card per cluster naming it; each pod on a card once.
	harness.Eventually(t, 60*time.Second, "cards of both clusters", func() bool {
		seen := cardsNaming(f.cardTexts(), append(append([]string(nil), pods["a"]...), pods["b"]...))
		for _, n := range seen {
			if n == 0 {
				return false
			}
		}
		return len(seen) == 4
	})
	for _, text := range f.cardTexts() {
		a, b := strings.Contains(text, "ev-a-"), strings.Contains(text, "ev-b-")
		switch {
		case a && b:
			t.Errorf("one card names pods of both clusters:\n%s", text)
		case a && !strings.Contains(text, "cluster a"), b && !strings.Contains(text, "cluster b"):
			t.Errorf("card does not name its cluster:\n%s", text)
		}
	}
	t.Logf("cards: %d, %v after the evictions", len(f.cardTexts()), time.Since(start).Round(time.Millisecond))

	fleetCredentials(t, f)
	fleetIDTheft(t, f)
	fleetForgedSource(t, f)
}

// fleetCredentials: cluster a's credentials (the hub's leaf-a user) on a real
// server. They are refused as a client connection (leaf nodes only); a rogue
// leaf node logged in as leaf-a cannot publish b's subjects or b's source
// deliveries, reach b's or the hub's JetStream API, or receive b's
// decisions, while its own ops.a.> arrives. And a forged ops.b.> decision
// stored in a's own OPS never enters the fleet OPS.
func fleetCredentials(t *testing.T, f *fleet) {
	t.Helper()
	// Not as a client.
	if nc, err := nats.Connect(f.hubURL, nats.UserInfo("leaf-a", f.pw["leaf_a"]), nats.RootCAs(f.caFile), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("leaf-a connected to the hub as a client")
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("leaf-a as a client: %v, want an authorization violation", err)
	}

	// A rogue leaf node with a's credentials and an open local account.
	port := testport.Must(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "rogue.conf")
	u := url.URL{Scheme: "tls", User: url.UserPassword("leaf-a", f.pw["leaf_a"]), Host: f.hubLeaf}
	body := fmt.Sprintf("listen: 127.0.0.1:%d\nleafnodes { reconnect: 1s, remotes: [ { url: %q, tls { ca_file: %q } } ] }\n", port, u.String(), f.caFile)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	harness.StartNATSServer(t, "rogue-a", conf, os.Environ())
	rogue, err := nats.Connect("nats://127.0.0.1:"+strconv.Itoa(port), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	fromB, err := rogue.SubscribeSync("ops.b.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	hubLive := subscribeLive(t, f.audit, "ops.>")
	// Its own subject arrives: the link is up and leaf-a's permissions apply.
	harness.Eventually(t, 20*time.Second, "the rogue leaf's ops.a.> at the hub", func() bool {
		_ = rogue.Publish("ops.a.cleanup.skipped.shop.rogue-probe", []byte("{}"))
		_ = rogue.Flush()
		hubLive.mu.Lock()
		defer hubLive.mu.Unlock()
		for _, m := range hubLive.msgs {
			if m.Subject == "ops.a.cleanup.skipped.shop.rogue-probe" {
				return true
			}
		}
		return false
	})
	// b's subjects and the hub's and b's JetStream: nothing arrives, nothing answers.
	for _, subj := range []string{"ops.b.cleanup.deleted.shop.forged", "fleet.b.S.forged", "$JSC.R.b.forged"} {
		if err := rogue.Publish(subj, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	for _, api := range []string{"$JS.hub.API.STREAM.INFO.OPS", "$JS.b.API.STREAM.INFO.OPS", "$JS.API.STREAM.INFO.OPS", "$JS.b.API.CONSUMER.CREATE.OPS"} {
		if _, err := rogue.Request(api, nil, time.Second); err == nil {
			t.Errorf("leaf-a's rogue leaf got an answer on %s", api)
		}
	}
	// b acts meanwhile: the hub's audit user sees it live, the rogue does not.
	b := f.edges["b"]
	probe := b.evictPods(t, "probe-b", 1)[0]
	hubLive.WaitFor(t, 30*time.Second, "b's deletion live at the hub", harness.Subject("ops.b.cleanup.deleted.shop."+probe))
	for {
		m, err := fromB.NextMsg(500 * time.Millisecond)
		if err != nil {
			break
		}
		if !strings.Contains(m.Subject, "forged") { // its own publish, delivered locally
			t.Fatalf("leaf-a's rogue leaf received b's %s", m.Subject)
		}
	}
	hubLive.mu.Lock()
	for _, m := range hubLive.msgs {
		if strings.Contains(m.Subject, "forged") {
			t.Errorf("the hub received %s from leaf-a", m.Subject)
		}
	}
	hubLive.mu.Unlock()

	// A forged decision of b stored in a's own OPS (a's cleanup user may
	// publish ops.*.cleanup.> on its own edge) stays there.
	a := f.edges["a"]
	cleanupA := connectUser(t, a.url, f.caFile, "cleanup", f.pw["cleanup"])
	ev, _ := envelope.New("cleanup/forged/deleted", "opswire/a/cleanup", "io.opswire.ops.cleanup.v1", "", map[string]string{}, time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := natsx.PublishEvent(ctx, jetStream(t, cleanupA), "ops.b.cleanup.deleted.shop.forged-in-a", ev, 5*time.Second); err != nil {
		t.Fatalf("cleanup on a's edge: %v", err)
	}
	if n := streamSubjects(t, a.auditJS, "OPS", "ops.b.>")["ops.b.cleanup.deleted.shop.forged-in-a"]; n != 1 {
		t.Fatalf("a's OPS holds the forged message %d times, want 1", n)
	}
	// A later decision of a reaches the fleet OPS, the forged one never does.
	after := a.evictPods(t, "after-forge-a", 1)[0]
	harness.Eventually(t, 30*time.Second, "a's next deletion in the fleet OPS", func() bool {
		return streamSubjects(t, f.auditJS, "OPS", "ops.a.cleanup.deleted.shop."+after)["ops.a.cleanup.deleted.shop."+after] == 1
	})
	if got := streamSubjects(t, f.auditJS, "OPS", "ops.>"); got["ops.b.cleanup.deleted.shop.forged-in-a"] != 0 || got["ops.b.cleanup.deleted.shop.forged"] != 0 ||
		got["ops.a.cleanup.skipped.shop.rogue-probe"] != 0 {
		t.Fatalf("the fleet OPS holds a forged or core-published message: %s", fmtCounts(got))
	}
	t.Logf("leaf-a refused as a client; its rogue leaf was refused b's subjects, b's source deliveries and replies, and the JetStream APIs of b and the hub, and never received b's decisions; a forged ops.b.> in a's OPS stayed out of the fleet OPS")
}

// TestFleetLinkCut: cluster a's leaf link to the hub is cut for 30 s
// (OPSWIRE_FLEET_CUT overrides) while a acts. a keeps acting on its own edge
// (its pods deleted, its OPS holding the decisions) and b keeps reaching the
// hub; once the link is back the hub's fleet OPS sources what it missed:
// every decision once; the hub's fleet OPS deduplicates no ids, so a
// message sourced twice would be stored twice. Counted at the source too:
// one DELETE per pod at a's API, each pod on exactly one card, and the
// notifier's delivered events equal to the decisions. With
// OPSWIRE_FLEET_HUB_STOP the hub itself then stops while both clusters act,
// with the same checks after its restart.
func TestFleetLinkCut(t *testing.T) {
	cut := 30 * time.Second
	if v := os.Getenv("OPSWIRE_FLEET_CUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OPSWIRE_FLEET_CUT: %v", err)
		}
		cut = d
	}
	f := startFleet(t)
	a, b := f.edges["a"], f.edges["b"]
	fleetHas := func(c, pod string) int {
		subj := "ops." + c + ".cleanup.deleted.shop." + pod
		return streamSubjects(t, f.auditJS, "OPS", subj)[subj]
	}
	// darkIn counts the subjects of a's deletions of dark-a-* pods in an OPS.
	darkIn := func(js jetstream.JetStream) int {
		n := 0
		for subj := range streamSubjects(t, js, "OPS", "ops.a.cleanup.deleted.shop.*") {
			if strings.HasPrefix(subj, "ops.a.cleanup.deleted.shop.dark-a-") {
				n++
			}
		}
		return n
	}
	// Both sources flowing before the cut.
	before := map[string]string{"a": a.evictPods(t, "pre-a", 1)[0], "b": b.evictPods(t, "pre-b", 1)[0]}
	harness.Eventually(t, 60*time.Second, "the first decisions in the fleet OPS", func() bool {
		return fleetHas("a", before["a"]) == 1 && fleetHas("b", before["b"]) == 1
	})

	a.link.Cut()
	cutAt := time.Now()
	dark := a.evictPods(t, "dark-a", 5)
	during := b.evictPods(t, "during-b", 1)[0]
	harness.Eventually(t, 30*time.Second, "a acting with its link cut: its pods deleted, the decisions in its own OPS", func() bool {
		for _, p := range dark {
			if harness.PodExists(t, a.cp.Client, "shop", p) {
				return false
			}
		}
		return darkIn(a.auditJS) == len(dark)
	})
	actedIn := time.Since(cutAt)
	harness.Eventually(t, 30*time.Second, "b's decision at the hub meanwhile", func() bool { return fleetHas("b", during) == 1 })
	harness.Never(t, time.Until(cutAt.Add(cut)), "a decision of a reaching the hub through the cut link", func() bool {
		return darkIn(f.auditJS) > 0
	})
	if a.watcher.Exited() || a.cleanup.Exited() {
		t.Fatal("a's services exited while the link was cut")
	}

	a.link.Restore()
	restored := time.Now()
	// The hub retries a stalled source with a backoff of 10 s per failed
	// attempt (nats-server, at most 2 min): after a 30 s cut it resumes
	// 10 to 30 s after the link is back.
	harness.Eventually(t, 120*time.Second, "the hub's fleet OPS caught up on a", func() bool {
		return darkIn(f.auditJS) == len(dark)
	})
	caughtUp := time.Since(restored)
	all := append([]string{before["a"], before["b"], during}, dark...)
	harness.Eventually(t, 60*time.Second, "a card for every pod", func() bool {
		for _, n := range cardsNaming(f.cardTexts(), all) {
			if n == 0 {
				return false
			}
		}
		return true
	})
	cardsIn := time.Since(restored)
	// Nothing more arrives: no repeat sourced, no card sent twice.
	harness.Never(t, 3*time.Second, "a second card for a pod", func() bool {
		for _, n := range cardsNaming(f.cardTexts(), all) {
			if n > 1 {
				return true
			}
		}
		return false
	})
	fleetOps := streamSubjects(t, f.auditJS, "OPS", "ops.*.cleanup.deleted.>")
	for c, p := range before {
		if fleetOps["ops."+c+".cleanup.deleted.shop."+p] != 1 {
			t.Errorf("fleet OPS holds %s's %s %d times", c, p, fleetOps["ops."+c+".cleanup.deleted.shop."+p])
		}
	}
	for _, p := range dark {
		if n := fleetOps["ops.a.cleanup.deleted.shop."+p]; n != 1 {
			t.Errorf("fleet OPS holds a's deletion of %s %d times, want 1", p, n)
		}
		if n := deletesOf(a.api, "shop", p); n != 1 {
			t.Errorf("%s: %d DELETE requests at a's API, want 1", p, n)
		}
	}
	for p, n := range cardsNaming(f.cardTexts(), all) {
		if n != 1 {
			t.Errorf("%s is on %d cards, want 1", p, n)
		}
	}
	if got := f.notifierEvents(); got != float64(len(all)) {
		t.Errorf("the notifier delivered %v events, want %d (one per decision)", got, len(all))
	}
	t.Logf("link of a cut %v: a deleted its %d pods in %v on its own; after the link returned the fleet OPS held each once %v later and every card arrived once %v later (%d cards, %v events delivered, one DELETE per pod)",
		cut, len(dark), actedIn.Round(time.Millisecond), caughtUp.Round(time.Millisecond), cardsIn.Round(time.Millisecond),
		len(f.cardTexts()), f.notifierEvents())

	// Then, with OPSWIRE_FLEET_HUB_STOP (e.g. 10s), the hub itself stops for
	// that long while both clusters act: on its restart it recovers each
	// source's position from its stored messages and resumes there (the 2 s
	// dedup window would show a repeat). Opt-in: it adds about a minute,
	// mostly nats-server's source retry backoff after the restart.
	hubStop := os.Getenv("OPSWIRE_FLEET_HUB_STOP")
	if hubStop == "" {
		return
	}
	outage, err := time.ParseDuration(hubStop)
	if err != nil {
		t.Fatalf("OPSWIRE_FLEET_HUB_STOP: %v", err)
	}
	f.hub.Stop(t)
	stopped := time.Now()
	down := map[string][]string{"a": a.evictPods(t, "hubdown-a", 2), "b": b.evictPods(t, "hubdown-b", 2)}
	for c, pods := range down {
		harness.Eventually(t, 30*time.Second, c+" acting with the hub down", func() bool {
			for _, p := range pods {
				if harness.PodExists(t, f.edges[c].cp.Client, "shop", p) {
					return false
				}
			}
			return true
		})
	}
	time.Sleep(time.Until(stopped.Add(outage))) // the outage itself
	f.hub.Start(t)
	restarted := time.Now()
	harness.Eventually(t, 120*time.Second, "the restarted hub's fleet OPS caught up on both clusters", func() bool {
		for c, pods := range down {
			for _, p := range pods {
				if fleetHas(c, p) != 1 {
					return false
				}
			}
		}
		return true
	})
	hubCaughtUp := time.Since(restarted)
	all = append(append(all, down["a"]...), down["b"]...)
	harness.Eventually(t, 60*time.Second, "a card for every pod evicted while the hub was down", func() bool {
		for _, n := range cardsNaming(f.cardTexts(), all) {
			if n == 0 {
				return false
			}
		}
		return true
	})
	hubCards := time.Since(restarted)
	harness.Never(t, 3*time.Second, "a second card for a pod after the hub's restart", func() bool {
		for _, n := range cardsNaming(f.cardTexts(), all) {
			if n > 1 {
				return true
			}
		}
		return false
	})
	fleetOps = streamSubjects(t, f.auditJS, "OPS", "ops.*.cleanup.deleted.>")
	if len(fleetOps) != len(all) {
		t.Errorf("fleet OPS holds %d deletions, want %d: %s", len(fleetOps), len(all), fmtCounts(fleetOps))
	}
	for subj, n := range fleetOps {
		if n != 1 {
			t.Errorf("fleet OPS holds %s %d times, want 1", subj, n)
		}
	}
	for c, pods := range down {
		for _, p := range pods {
			if n := deletesOf(f.edges[c].api, "shop", p); n != 1 {
				t.Errorf("%s/%s: %d DELETE requests, want 1", c, p, n)
			}
		}
	}
	if got := f.notifierEvents(); got != float64(len(all)) {
		t.Errorf("the notifier delivered %v events after the hub's restart, want %d", got, len(all))
	}
	if f.notifier.Exited() {
		t.Fatal("the hub's notifier exited while the hub was down")
	}
	t.Logf("hub stopped %v while both clusters acted: after its restart the fleet OPS held all %d decisions once %v later, every card once %v later (%v events delivered in all)",
		restarted.Sub(stopped).Round(time.Millisecond), len(all), hubCaughtUp.Round(time.Millisecond), hubCards.Round(time.Millisecond), f.notifierEvents())
}

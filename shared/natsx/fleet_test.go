package natsx

import (
	"context"
	"net/url"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/testkit"
	"github.com/opswire/opswire/shared/testport"
)

// TestFleetHubSourcesEdges: a hub (JetStream domain "hub") and an edge
// (domain "a", a leaf node of the hub), each with the streams EnsureStreams
// makes for it. The hub's OPS has no subjects and no KUBE beside it; it
// sources the edge's ops.a.> across the leaf connection, and not a forged
// ops.b.> that the edge stored. It has no Nats-Msg-Id deduplication: edge
// a's message carrying the id of edge b's next one does not drop b's.
func TestFleetHubSourcesEdges(t *testing.T) {
	leafPort := testport.Must(t)
	hub := natstest.StartWithOptions(t, &server.Options{JetStreamDomain: "hub",
		LeafNode: server.LeafNodeOpts{Host: "127.0.0.1", Port: leafPort}})
	u, _ := url.Parse("nats-leaf://127.0.0.1:" + strconv.Itoa(leafPort))
	// No live ops.> from the hub into an edge: without the leaf users'
	// permissions of a deployment, one edge's OPS would store the other's.
	edge := natstest.StartWithOptions(t, &server.Options{JetStreamDomain: "a",
		LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, DenyImports: []string{"ops.>"}}}}})
	edgeB := natstest.StartWithOptions(t, &server.Options{JetStreamDomain: "b",
		LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, DenyImports: []string{"ops.>"}}}}})
	testkit.Eventually(t, 10*time.Second, "the edges to connect to the hub as leaf nodes", func() bool {
		return edge.NumLeafNodes() > 0 && edgeB.NumLeafNodes() > 0 && hub.NumLeafNodes() >= 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hubJS, edgeJS, edgeBJS := jsOf(t, hub), jsOf(t, edge), jsOf(t, edgeB)
	for _, js := range []jetstream.JetStream{edgeJS, edgeBJS} {
		if err := EnsureStreams(ctx, js, config.Default().NATS); err != nil {
			t.Fatal(err)
		}
	}
	hubCfg := config.Default().NATS
	hubCfg.OpsSources = []string{"a", "b"}
	// A hub OPS made before it dropped its id deduplication is updated.
	old := OpsStreamConfig(hubCfg)
	old.Duplicates = 10 * time.Minute
	if _, err := hubJS.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // idempotent
		if err := EnsureStreams(ctx, hubJS, hubCfg); err != nil {
			t.Fatalf("EnsureStreams on the hub #%d: %v", i, err)
		}
	}
	if err := WaitForStreams(ctx, hubJS, zerolog.Nop(), time.Hour, StreamNames(hubCfg)...); err != nil {
		t.Fatalf("WaitStreams on the hub: %v", err)
	}
	if _, err := hubJS.Stream(ctx, "KUBE"); err == nil {
		t.Fatal("the hub has a KUBE stream")
	}
	ops, err := hubJS.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	if sc := ops.CachedInfo().Config; len(sc.Subjects) != 0 || len(sc.Sources) != 2 || sc.Sources[0].FilterSubject != "ops.a.>" ||
		sc.Sources[1].FilterSubject != "ops.b.>" || sc.Duplicates != 0 {
		t.Fatalf("hub OPS config: subjects %v, sources %+v, duplicate window %v", sc.Subjects, sc.Sources, sc.Duplicates)
	}
	for _, p := range []struct {
		js       jetstream.JetStream
		subj, id string
	}{
		{edgeJS, "ops.a.cleanup.deleted.ns.p", "cleanup/u1/deleted"},
		{edgeJS, "ops.b.cleanup.deleted.ns.forged", "cleanup/u2/deleted"},
		{edgeJS, "ops.a.report.restarts", "report/b/restarts/42"}, // b's next id, first
		{edgeBJS, "ops.b.report.restarts", "report/b/restarts/42"},
	} {
		ev, _ := envelope.New(p.id, "opswire/a/cleanup", "t.v1", "", map[string]int{}, time.Now())
		if _, err := PublishEvent(ctx, p.js, p.subj, ev, time.Second); err != nil {
			t.Fatalf("publish %s on an edge: %v", p.subj, err)
		}
	}
	want := map[string]uint64{"ops.a.cleanup.deleted.ns.p": 1, "ops.a.report.restarts": 1, "ops.b.report.restarts": 1}
	for {
		info, err := ops.Info(ctx, jetstream.WithSubjectFilter("ops.>"))
		if err == nil && info.State.Msgs >= 3 {
			if !reflect.DeepEqual(info.State.Subjects, want) {
				t.Fatalf("hub OPS holds %v, want %v", info.State.Subjects, want)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the hub's OPS never sourced the edge's message: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func jsOf(t *testing.T, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

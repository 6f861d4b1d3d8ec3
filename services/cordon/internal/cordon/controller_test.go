package cordon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// TestControllerCapsABurst runs the mirror, controller and actuator on a real
// (embedded) nats-server and a fake API: ten nodes cross the threshold at
// once, and the mirror never shows opswire's own writes (no watcher). The
// default cap (20 % of 11 managed nodes, 2) must still hold: at exactly 2
// marks when only opswire's marks count, and at 1 more when the node a
// person cordoned counts too (the default).
func TestControllerCapsABurst(t *testing.T) {
	for _, tc := range []struct {
		name      string
		capCounts string
		want      int
	}{
		{"opswire's marks only", config.CapCountsMarks, 2},
		{"a person's cordon counts", config.CapCountsUnavailable, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { testControllerCapsABurst(t, tc.capCounts, tc.want) })
	}
}

func testControllerCapsABurst(t *testing.T, capCounts string, want int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := natstest.Connect(t)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}

	var objs []runtime.Object
	for i := range 10 {
		n := apiNode(fmt.Sprintf("node-%d", i))
		objs = append(objs, n)
		objs = append(objs, pods(n.Name, 100)...)
		publishNode(ctx, t, js, stateFromNode(n, 100))
	}
	// A node a person cordoned, and one that opts out: neither is touched.
	person := apiNode("manual", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	optOut := apiNode("optout", func(n *corev1.Node) { n.Labels[events.LabelDoNotCordon] = "" })
	for _, n := range []*corev1.Node{person, optOut} {
		objs = append(objs, n)
		objs = append(objs, pods(n.Name, 150)...)
		publishNode(ctx, t, js, stateFromNode(n, 150))
	}
	client := fake.NewClientset(objs...)

	policy := seedPolicy("cordon")
	policy.CapCounts = capCounts
	ledger := NewLedger(false)
	m := NewMetrics(nil)
	changes := NewChanges()
	mirror := kubestate.New(js, "prod", zerolog.Nop(), nil, kubestate.Handlers{OnNode: changes.OnNode}, subject.KindNode)
	audit := actuate.NewAuditor(js, 0, nil, zerolog.Nop())
	defer audit.Close(time.Second)
	act := NewActuator(client, audit, record.NewFakeRecorder(100), ledger, NewFleets(mirror, ledger, policy, client, 0),
		ActuatorConfig{Cluster: "prod", Policy: policy, Identity: "t"}, m, zerolog.Nop())
	ctrl := NewController(mirror, changes, policy, ledger, act, time.Hour, m, zerolog.Nop())

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- mirror.Run(runCtx) }()
	go func() {
		if err := mirror.WaitSynced(runCtx); err != nil {
			done <- err
			return
		}
		done <- ctrl.Run(runCtx)
	}()

	ops := collect(ctx, t, js)
	deadline := time.Now().Add(20 * time.Second)
	for {
		cordoned, skipped := ops.count(VerbCordoned), ops.count(VerbSkipped)
		if cordoned+skipped >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: %d cordoned, %d skipped", cordoned, skipped)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if c, s := ops.count(VerbCordoned), ops.count(VerbSkipped); c != want || s != 10-want {
		t.Fatalf("published %d cordoned and %d skipped, want %d and %d", c, s, want, 10-want)
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, n := range list.Items {
		if n.Labels[events.LabelAutoCordon] != "" {
			held++
			if !n.Spec.Unschedulable {
				t.Errorf("%s marked but schedulable", n.Name)
			}
		}
		if (n.Name == "manual" || n.Name == "optout") && n.Labels[events.LabelAutoCordon] != "" {
			t.Errorf("%s was touched", n.Name)
		}
	}
	if held != want {
		t.Fatalf("%d nodes carry opswire's mark, want %d", held, want)
	}
}

func publishNode(ctx context.Context, t *testing.T, js jetstream.JetStream, n *events.NodeState) {
	t.Helper()
	ev, err := envelope.New("node/"+n.UID+"/"+n.ResourceVersion, envelope.Source("prod", "watcher"), events.TypeNode, n.Name, n, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.PublishEvent(ctx, js, subject.Node("prod", n.Name), ev, time.Second); err != nil {
		t.Fatal(err)
	}
}

type collected struct {
	ch   <-chan string
	seen map[string]int
}

func collect(ctx context.Context, t *testing.T, js jetstream.JetStream) *collected {
	t.Helper()
	cons, err := js.OrderedConsumer(ctx, subject.OpsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"ops.prod.cordon.>"}})
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1000)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var d events.CordonDecision
		if _, err := envelope.Decode(m.Headers(), m.Data(), events.TypeCordon, &d); err == nil {
			ch <- d.Verb
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return &collected{ch: ch, seen: map[string]int{}}
}

func (c *collected) count(verb string) int {
	for {
		select {
		case v := <-c.ch:
			c.seen[v]++
		default:
			return c.seen[verb]
		}
	}
}

// TestControllerTermEndsWithAWriteInDoubt: a's cordon is answered 504 and
// never commits, and the term ends while it is in doubt (the next leader's
// recovery decides it from its intent). opswire_cordon_writes_in_doubt_total
// outlives the term, and its unanswered minus the decided ones is documented
// as the write in doubt now: the term's end must decide it (term_ended), or
// this replica reports a write in doubt for good, as a standby and in its
// later terms.
func TestControllerTermEndsWithAWriteInDoubt(t *testing.T) {
	a := apiNode("a")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a}, pods("a", 100)...)...)
	loseAnswer(t, h, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), false, 0)
	ctrl := NewController(staticNodes{mirrorOf(a, 100)}, NewChanges(), p, h.ledger, h.act, time.Hour, h.m, zerolog.Nop())
	how := func(h *harness, label string) float64 {
		return testutil.ToFloat64(h.m.WritesInDoubt.WithLabelValues(label))
	}
	ctx, endTerm := context.WithCancel(context.Background())
	defer endTerm()
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx) }()
	testkit.Eventually(t, 10*time.Second, "a's cordon in doubt", func() bool { return how(h, actuate.DoubtUnanswered) >= 1 })
	endTerm()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not stop 10s after its term ended")
	}
	open := how(h, actuate.DoubtUnanswered)
	for _, l := range []string{actuate.DoubtApplied, actuate.DoubtNotApplied, actuate.DoubtUnclear, actuate.DoubtGone, "term_ended"} {
		open -= how(h, l)
	}
	if verb, _ := verbs(t, h); open != 0 || len(verb) != 0 {
		t.Errorf("after the term: writes in doubt now (unanswered - decided) = %v, published %v; want 0 (decided term_ended), nothing published", open, verb)
	}
}

package kubestate

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

func publish(t *testing.T, js jetstream.JetStream, subj, id, typ string, v any) {
	t.Helper()
	ev, err := envelope.New(id, "opswire/c/test", typ, "", v, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.PublishEvent(context.Background(), js, subj, ev, time.Second); err != nil {
		t.Fatal(err)
	}
}

// withStreams starts a JetStream server with the KUBE and OPS streams and
// returns a context cancelled when the test ends.
func withStreams(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	return ctx, js
}

func TestMirrorLoadsStateAndFollowsChanges(t *testing.T) {
	ctx, js := withStreams(t)
	// Initial state: two versions of one pod (only the last counts), a node, another cluster's pod.
	publish(t, js, subject.Pod("c", "ns", "p1"), "pod/u1/1", events.TypePod, events.PodState{UID: "u1", Namespace: "ns", Name: "p1", Phase: "Pending"})
	publish(t, js, subject.Pod("c", "ns", "p1"), "pod/u1/2", events.TypePod, events.PodState{UID: "u1", Namespace: "ns", Name: "p1", Phase: "Running"})
	publish(t, js, subject.Node("c", "n1.example"), "node/n1/1", events.TypeNode, events.NodeState{UID: "n1", Name: "n1.example", Pods: 1})
	publish(t, js, subject.Pod("other", "ns", "x"), "pod/x/1", events.TypePod, events.PodState{UID: "x", Namespace: "ns", Name: "x"})

	var mu sync.Mutex
	var deleted []string
	m := New(js, "c", zerolog.Nop(), nil, Handlers{
		OnPod: func(old, cur *events.PodState) {
			if cur == nil {
				mu.Lock()
				deleted = append(deleted, old.Name)
				mu.Unlock()
			}
		},
	})
	go m.Run(ctx)
	if err := m.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if pods, nodes := m.Len(); pods != 1 || nodes != 1 {
		t.Fatalf("after sync: %d pods %d nodes, want 1 and 1", pods, nodes)
	}
	if p, _ := m.Pod("ns", "p1"); p.Phase != "Running" {
		t.Fatalf("p1 phase %q, want the last state", p.Phase)
	}
	if n, ok := m.Node("n1.example"); !ok || n.Pods != 1 {
		t.Fatalf("node n1.example = %+v", n)
	}

	// A malformed message is skipped, not fatal.
	if _, err := js.Publish(ctx, subject.Pod("c", "ns", "junk"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	// A tombstone removes the pod and tells the handler.
	publish(t, js, subject.Pod("c", "ns", "p1"), "pod/u1/delete/3", events.TypePod, events.PodState{Op: events.OpDelete, UID: "u1", Namespace: "ns", Name: "p1"})
	testkit.Eventually(t, 10*time.Second, "tombstone", func() bool { _, ok := m.Pod("ns", "p1"); return !ok })
	if got := testutil.ToFloat64(m.malformed); got != 1 {
		t.Fatalf("malformed counter = %v, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(deleted) != 1 || deleted[0] != "p1" {
		t.Fatalf("deleted = %v, want [p1]", deleted)
	}
}

func TestCatchUpSeesEverythingStored(t *testing.T) {
	ctx, js := withStreams(t)
	m := New(js, "c", zerolog.Nop(), nil, Handlers{})
	go m.Run(ctx)
	if err := m.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 20; round++ {
		name := fmt.Sprintf("p%d", round)
		publish(t, js, subject.Pod("c", "ns", name), "pod/"+name+"/1", events.TypePod, events.PodState{UID: name, Namespace: "ns", Name: name})
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := m.CatchUp(cctx)
		ccancel()
		if err != nil {
			t.Fatal(err)
		}
		// No polling here: CatchUp itself must guarantee the state is in.
		if _, ok := m.Pod("ns", name); !ok {
			t.Fatalf("round %d: pod stored before CatchUp is missing after it", round)
		}
	}
}

// TestReplacedPodIsFreed: the map's key lies in the pod's own block
// (events.DecodePodKeyed), so a pod replaced under the same subject must
// not stay alive through the key.
func TestReplacedPodIsFreed(t *testing.T) {
	m := New(nil, "c", zerolog.Nop(), nil, Handlers{})
	in := &events.Interner{}
	msg := func(rv string) fuzzMsg {
		ev, err := envelope.New("pod/u/"+rv, "opswire/c/watcher", events.TypePod, "", events.PodState{Op: events.OpUpsert, UID: "u", Namespace: "ns", Name: "p", ResourceVersion: rv}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		nm := ev.Msg(subject.Pod("c", "ns", "p"))
		return fuzzMsg{subj: nm.Subject, h: nm.Header, data: nm.Data}
	}
	first := msg("1")
	d := decode(first, in, m.held)
	freed := make(chan struct{})
	runtime.AddCleanup(d.pod, func(ch chan struct{}) { close(ch) }, freed)
	m.apply(first, d)
	second := msg("2")
	m.apply(second, decode(second, in, m.held))
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-freed:
			if p, ok := m.Pod("ns", "p"); !ok || p.ResourceVersion != "2" {
				t.Fatalf("mirror holds %+v", p)
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the replaced pod is still alive")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMirrorReplacesAConsumerNATSCannotRecreate holds the fault seen after a
// NATS node was SIGKILLed: nats.go's ordered consumer retries its next
// consumer under one name for ever, and the server cannot serve that name
// (there, placed on the dead node). Here the name is taken by a consumer the
// ordered one cannot be updated to. The mirror must notice, replace the
// consumer under a new name and resume after the last message it applied,
// without reloading the state.
func TestMirrorReplacesAConsumerNATSCannotRecreate(t *testing.T) {
	ctx, js := withStreams(t)
	publish(t, js, subject.Pod("c", "ns", "p0"), "pod/u0/1", events.TypePod, events.PodState{UID: "u0", Namespace: "ns", Name: "p0", Phase: "Running"})
	publish(t, js, subject.Pod("c", "ns", "p1"), "pod/u1/1", events.TypePod, events.PodState{UID: "u1", Namespace: "ns", Name: "p1", Phase: "Running"})

	var mu sync.Mutex
	seen := map[string]int{}
	m := New(js, "c", zerolog.Nop(), nil, Handlers{OnPod: func(_, cur *events.PodState) {
		mu.Lock()
		defer mu.Unlock()
		seen[cur.Name]++
	}}, subject.KindPod)
	go m.Run(ctx)
	if err := m.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, subject.KubeStream)
	if err != nil {
		t.Fatal(err)
	}
	names := st.ConsumerNames(ctx)
	var first string
	for n := range names.Name() {
		first = n
	}
	if names.Err() != nil || !strings.HasSuffix(first, "_1") {
		t.Fatalf("mirror's consumer %q (%v): want the ordered consumer's first", first, names.Err())
	}
	// The name nats.go's reset will ask for, taken by a consumer it cannot
	// be updated to (another ack policy).
	next := strings.TrimSuffix(first, "_1") + "_2"
	if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Name: next, AckPolicy: jetstream.AckExplicitPolicy,
		InactiveThreshold: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteConsumer(ctx, first); err != nil {
		t.Fatal(err)
	}
	publish(t, js, subject.Pod("c", "ns", "p1"), "pod/u1/2", events.TypePod, events.PodState{UID: "u1", Namespace: "ns", Name: "p1", Phase: "Succeeded"})
	publish(t, js, subject.Pod("c", "ns", "p2"), "pod/u2/1", events.TypePod, events.PodState{UID: "u2", Namespace: "ns", Name: "p2", Phase: "Running"})
	testkit.Eventually(t, 10*time.Second, "the changes after the lost consumer", func() bool {
		p1, _ := m.Pod("ns", "p1")
		_, ok := m.Pod("ns", "p2")
		return ok && p1.Phase == "Succeeded"
	})
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]int{"p0": 1, "p1": 2, "p2": 1}; !maps.Equal(seen, want) {
		t.Fatalf("handler calls per pod %v, want %v (resumed, not reloaded)", seen, want)
	}
}

// A mirror of every kind filters on the whole of the cluster's KUBE
// (kubeFilters): a kind it does not know is skipped without counting as
// malformed, and the load still ends when such a message is the last one.
func TestMirrorSkipsKindsItDoesNotHold(t *testing.T) {
	ctx, js := withStreams(t)
	publish(t, js, subject.Pod("c", "ns", "p1"), "pod/u1/1", events.TypePod, events.PodState{UID: "u1", Namespace: "ns", Name: "p1"})
	publish(t, js, subject.Node("c", "n1"), "node/n1/1", events.TypeNode, events.NodeState{UID: "n1", Name: "n1"})
	publish(t, js, "kube.c.deployment.ns.web", "deployment/d1/1", "io.opswire.kube.deployment", map[string]string{"name": "web"})

	m := New(js, "c", zerolog.Nop(), nil, Handlers{})
	if got := kubeFilters("c", m.kinds); len(got) != 1 || got[0] != subject.Kube("c") {
		t.Fatalf("filters of a mirror of every kind = %v, want [%s]", got, subject.Kube("c"))
	}
	go m.Run(ctx)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.WaitSynced(wctx); err != nil {
		t.Fatalf("load whose last message is of an unknown kind: %v", err)
	}
	if pods, nodes := m.Len(); pods != 1 || nodes != 1 {
		t.Fatalf("%d pods %d nodes, want 1 and 1", pods, nodes)
	}
	if got := testutil.ToFloat64(m.malformed); got != 0 {
		t.Fatalf("malformed counter = %v, want 0", got)
	}
}

func TestDecodeSkipsWhatTheMirrorDoesNotHold(t *testing.T) {
	pod, err := envelope.New("pod/u/1", "opswire/c/watcher", events.TypePod, "", events.PodState{Namespace: "ns", Name: "p"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h := pod.Msg("x").Header
	every, nodes := kindSet{pods: true, nodes: true}, kindSet{nodes: true}
	for _, tc := range []struct {
		subj         string
		held         kindSet
		skip, errors bool
	}{
		{"kube.c.pod.ns.p", every, false, false},
		{"kube.c.pod.ns.p", nodes, true, false},        // a pod on a mirror of nodes
		{"kube.c.deployment.ns.d", every, true, false}, // a kind this build does not know
		{"kube.c.pod", every, false, true},             // a known kind, wrong tokens: malformed
		{"kube.c", every, false, true},
	} {
		d := decode(fuzzMsg{subj: tc.subj, h: h, data: pod.Data}, nil, tc.held)
		if d.skip != tc.skip || (d.err != nil) != tc.errors || tc.skip && d.pod != nil {
			t.Errorf("decode(%s, %+v): skip %v, err %v, pod %v; want skip %v, error %v", tc.subj, tc.held, d.skip, d.err, d.pod != nil, tc.skip, tc.errors)
		}
	}
}

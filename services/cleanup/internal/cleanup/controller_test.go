package cleanup

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/events"
)

// memState is a State held in maps (the mirror's role).
type memState struct {
	mu    sync.Mutex
	pods  map[string]*events.PodState
	nodes map[string]*events.NodeState
}

func (s *memState) Pod(ns, name string) (*events.PodState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[ns+"/"+name]
	return p, ok
}

func (s *memState) Node(name string) (*events.NodeState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	return n, ok
}

func (s *memState) Pods() []*events.PodState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*events.PodState
	for _, p := range s.pods {
		out = append(out, p)
	}
	return out
}

func waitGone(t *testing.T, c *fake.Clientset, name string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, err := c.CoreV1().Pods("apps").Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s not deleted within %v", name, within)
	return time.Time{}
}

// TestControllerSchedulesStuckPods: a pod that becomes due later is acted on
// at its deadline through the delaying queue, with no further change and no
// tick (the tick interval is an hour here).
func TestControllerSchedulesStuckPods(t *testing.T) {
	start := time.Now()
	dts := start.Add(-5*time.Minute + 300*time.Millisecond) // due in 300 ms with a 5m timeout
	ts := metav1.NewTime(dts)
	live := livePod(func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
	state := &memState{pods: map[string]*events.PodState{
		"apps/web-1": pod(func(p *events.PodState) { p.DeletionTimestamp = &dts; p.CreationTimestamp = start.Add(-time.Hour) }),
	}}
	client := fake.NewClientset(live)
	act := NewActuator(client, &recPub{}, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.New(zerolog.NewTestWriter(t)), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, time.Hour, 2, nil, zerolog.New(zerolog.NewTestWriter(t)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	gone := waitGone(t, client, "web-1", 3*time.Second)
	due := dts.Add(5 * time.Minute)
	if gone.Before(due) {
		t.Fatalf("force-deleted %v before its deadline", due.Sub(gone))
	}
}

// TestControllerNodeReadinessRechecksPods: a StatefulSet pod held because its
// node is Ready is force-deleted as soon as the node's readiness changes.
func TestControllerNodeReadinessRechecksPods(t *testing.T) {
	dts := time.Now().Add(-10 * time.Minute)
	ts := metav1.NewTime(dts)
	live := livePod(liveSTS, func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	ready := &events.NodeState{Name: "n1", Ready: "True"}
	state := &memState{
		pods: map[string]*events.PodState{"apps/web-1": pod(func(p *events.PodState) {
			p.DeletionTimestamp = &dts
			p.Owner = &events.Owner{Kind: "StatefulSet", Name: "db"}
		})},
		nodes: map[string]*events.NodeState{"n1": ready},
	}
	client := fake.NewClientset(live, node)
	pub := &recPub{}
	act := NewActuator(client, pub, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, time.Hour, 1, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(3 * time.Second)
	for len(pub.all()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no skip published")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := opsSummary(t, pub.all()); got[0] != "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/StatefulSetOnReadyNode" {
		t.Fatalf("first decision %v", got)
	}
	node.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := client.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	notReady := &events.NodeState{Name: "n1", Ready: "False"}
	state.mu.Lock()
	state.nodes["n1"] = notReady
	state.mu.Unlock()
	ctl.OnNode(ready, notReady, state)
	waitGone(t, client, "web-1", 3*time.Second)
}

func BenchmarkDecide(b *testing.B) {
	p := testPolicy()
	pods := []*events.PodState{pod(), pod(failed("Evicted")), pod(deleting(t0.Add(-time.Hour))), pod(failed("Error"))}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Decide(pods[i%len(pods)], nil, t0)
	}
}

// BenchmarkTick measures one reconcile tick over a cluster at the scale
// target (150,000 pods, 1% of them Evicted but opted out, so no API calls):
// enqueue every key, then decide on each.
func BenchmarkTick(b *testing.B) {
	const pods = 150000
	state := &memState{pods: make(map[string]*events.PodState, pods), nodes: map[string]*events.NodeState{}}
	for i := range pods {
		name := "p-" + strconv.Itoa(i)
		p := &events.PodState{UID: name, Namespace: "ns-" + strconv.Itoa(i%500), Name: name, NodeName: "n-" + strconv.Itoa(i%5000),
			Phase: "Running", CreationTimestamp: t0.Add(-time.Hour)}
		if i%100 == 0 {
			p.Phase, p.Reason, p.Labels = "Failed", "Evicted", map[string]string{events.LabelOptOut: ""}
		}
		state.pods[p.Namespace+"/"+p.Name] = p
	}
	// A FakeRecorder without a channel drops events instead of blocking.
	act := NewActuator(fake.NewClientset(), &recPub{}, &record.FakeRecorder{}, NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: NewWindow(10, time.Minute), Now: func() time.Time { return t0 },
	})
	ctl := NewController(testPolicy(), act, time.Hour, 1, func() time.Time { return t0 }, zerolog.Nop())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ctl.EnqueueAll(state)
		for ctl.Len() > 0 {
			ctl.processNext(ctx, state)
		}
	}
}

package cleanup

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/testkit"
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

func (s *memState) Nodes() []*events.NodeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*events.NodeState
	for _, n := range s.nodes {
		out = append(out, n)
	}
	return out
}

func waitGone(t *testing.T, c *fake.Clientset, name string, within time.Duration) time.Time {
	t.Helper()
	var gone time.Time
	testkit.Eventually(t, within, name+" deleted", func() bool {
		_, err := c.CoreV1().Pods("apps").Get(context.Background(), name, metav1.GetOptions{})
		gone = time.Now()
		return apierrors.IsNotFound(err)
	})
	return gone
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
	act := NewActuator(client, &actuatetest.Publisher{}, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.New(zerolog.NewTestWriter(t)), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, nil, time.Hour, 2, nil, zerolog.New(zerolog.NewTestWriter(t)))
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

// waitPublished waits until n decisions were published and returns their summaries.
func waitPublished(t *testing.T, pub *actuatetest.Publisher, n int) []string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for len(pub.All()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d decisions published, want %d: %v", len(pub.All()), n, opsSummary(t, pub.All()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	return opsSummary(t, pub.All())
}

// setNode changes a node in the API and in the mirror, and tells the controller.
func setNode(t *testing.T, client *fake.Clientset, state *memState, ctl *Controller, live *corev1.Node) {
	t.Helper()
	if _, err := client.CoreV1().Nodes().Update(context.Background(), live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cur := liveNode(live)
	state.mu.Lock()
	old := state.nodes[live.Name]
	state.nodes[live.Name] = cur
	state.mu.Unlock()
	ctl.OnNode(old, cur, state)
}

// TestControllerPartitionRule: a StatefulSet pod held because its node is
// Ready stays held when the node turns Unknown (a partition looks the same),
// and is force-deleted as soon as the node is tainted out-of-service.
func TestControllerPartitionRule(t *testing.T) {
	dts := time.Now().Add(-10 * time.Minute)
	ts := metav1.NewTime(dts)
	live := livePod(liveSTS, func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	state := &memState{
		pods: map[string]*events.PodState{"apps/web-1": pod(func(p *events.PodState) {
			p.DeletionTimestamp = &dts
			p.Owner = &events.Owner{Kind: "StatefulSet", Name: "db"}
		})},
		nodes: map[string]*events.NodeState{"n1": liveNode(node)},
	}
	for _, n := range []string{"n2", "n3", "n4"} { // Ready nodes: the brake stays off
		state.nodes[n] = &events.NodeState{Name: n, Ready: "True"}
	}
	client := fake.NewClientset(live, node)
	pub := &actuatetest.Publisher{}
	act := NewActuator(client, pub, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, nil, time.Hour, 1, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	if got := waitPublished(t, pub, 1); got[0] != "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/StatefulSetOnReadyNode" {
		t.Fatalf("first decision %v", got)
	}
	node = node.DeepCopy()
	node.Status.Conditions[0].Status = corev1.ConditionUnknown
	setNode(t, client, state, ctl, node)
	if got := waitPublished(t, pub, 2); got[1] != "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown" {
		t.Fatalf("second decision %v", got)
	}
	if _, err := client.CoreV1().Pods("apps").Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("pod on an Unknown node was deleted: %v", err)
	}
	node = node.DeepCopy()
	node.Spec.Taints = []corev1.Taint{{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	setNode(t, client, state, ctl, node)
	waitGone(t, client, "web-1", 3*time.Second)
	if got := waitPublished(t, pub, 3); got[2] != "ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted" {
		t.Fatalf("third decision %v", got)
	}
}

// TestControllerBrake: while more than a third of the nodes is not Ready, a
// stuck pod is held (reported once, gauge on); when enough nodes are Ready
// again the brake releases by itself and the pod is force-deleted.
func TestControllerBrake(t *testing.T) {
	dts := time.Now().Add(-10 * time.Minute)
	ts := metav1.NewTime(dts)
	live := livePod(func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
	state := &memState{
		pods:  map[string]*events.PodState{"apps/web-1": pod(func(p *events.PodState) { p.DeletionTimestamp = &dts })},
		nodes: map[string]*events.NodeState{},
	}
	nodes := map[string]*corev1.Node{}
	for i, ready := range []corev1.ConditionStatus{"True", "True", "Unknown", "Unknown", "Unknown", "False"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n" + strconv.Itoa(i+1)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		nodes[n.Name], state.nodes[n.Name] = n, liveNode(n)
	}
	client := fake.NewClientset(live)
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pub := &actuatetest.Publisher{}
	m := NewMetrics(nil)
	act := NewActuator(client, pub, record.NewFakeRecorder(10), m, zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, m, time.Hour, 1, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	if got := waitPublished(t, pub, 1); got[0] != "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/MassNodeFailure" {
		t.Fatalf("first decision %v", got)
	}
	if v := gaugeValue(t, m.Brake); v != 1 {
		t.Fatalf("brake gauge %v, want 1", v)
	}
	ctl.EnqueueAll(state) // a tick: the held pod is not reported again
	for _, name := range []string{"n3", "n4", "n5"} {
		n := nodes[name].DeepCopy()
		n.Status.Conditions[0].Status = corev1.ConditionTrue
		setNode(t, client, state, ctl, n)
	}
	waitGone(t, client, "web-1", 3*time.Second)
	got := waitPublished(t, pub, 2)
	if len(got) != 2 || got[1] != "ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted" {
		t.Fatalf("decisions %v", got)
	}
	if v := gaugeValue(t, m.Brake); v != 0 {
		t.Fatalf("brake gauge %v, want 0", v)
	}
	// The brake releases at the second node back (2 of 6 not Ready is the
	// share, not above it): the third one's recount may still be on its way.
	deadline := time.Now().Add(3 * time.Second)
	for n := ctl.NodeCount(); n != (NodeCount{Nodes: 6, NotReady: 1}); n = ctl.NodeCount() {
		if time.Now().After(deadline) {
			t.Fatalf("node count %+v, want 6 nodes, 1 not Ready", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestControllerOutOfServiceTaintOutranksTheBrake: with 4 of 6 nodes
// Unknown the brake holds every stuck pod; a person then taints one of them
// out-of-service. Its pods (a StatefulSet pod and a plain one) are
// force-deleted at once, the brake still on, while a plain pod on another
// Unknown node stays held. PodGC's gcTerminating likewise ignores the zone
// state for a node not Ready and tainted out-of-service.
func TestControllerOutOfServiceTaintOutranksTheBrake(t *testing.T) {
	dts := time.Now().Add(-10 * time.Minute)
	ts := metav1.NewTime(dts)
	type stuck struct{ name, uid, node, owner string }
	pods := []stuck{{"db-0", "uid-db", "n3", "StatefulSet"}, {"tmp-0", "uid-tmp", "n3", ""}, {"web-1", "uid-web", "n4", ""}}
	state := &memState{pods: map[string]*events.PodState{}, nodes: map[string]*events.NodeState{}}
	client := fake.NewClientset()
	for _, sp := range pods {
		live := livePod(func(p *corev1.Pod) {
			p.Name, p.UID, p.Spec.NodeName, p.DeletionTimestamp, p.Status.Phase = sp.name, types.UID(sp.uid), sp.node, &ts, corev1.PodRunning
		})
		if sp.owner != "" {
			liveSTS(live)
		}
		if err := client.Tracker().Add(live); err != nil {
			t.Fatal(err)
		}
		state.pods["apps/"+sp.name] = liveState(live, nil)
	}
	nodes := map[string]*corev1.Node{}
	for i, ready := range []corev1.ConditionStatus{"True", "True", "Unknown", "Unknown", "Unknown", "Unknown"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n" + strconv.Itoa(i+1)},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		nodes[n.Name], state.nodes[n.Name] = n, liveNode(n)
		if err := client.Tracker().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	pub := &actuatetest.Publisher{}
	m := NewMetrics(nil)
	act := NewActuator(client, pub, record.NewFakeRecorder(10), m, zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, m, time.Hour, 1, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	held := waitPublished(t, pub, 3)
	for _, want := range []string{
		"ops.c1.cleanup.skipped.apps.db-0 cleanup/uid-db/skipped/NodeNotConfirmedDown",
		"ops.c1.cleanup.skipped.apps.tmp-0 cleanup/uid-tmp/skipped/MassNodeFailure",
		"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-web/skipped/MassNodeFailure",
	} {
		if !strings.Contains(strings.Join(held, "\n"), want) {
			t.Fatalf("decisions %v, want %s", held, want)
		}
	}
	n3 := nodes["n3"].DeepCopy()
	n3.Spec.Taints = []corev1.Taint{{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	setNode(t, client, state, ctl, n3)
	waitGone(t, client, "db-0", 3*time.Second)
	waitGone(t, client, "tmp-0", 3*time.Second)
	got := strings.Join(waitPublished(t, pub, 5), "\n")
	for _, want := range []string{"ops.c1.cleanup.forcedeleted.apps.db-0 cleanup/uid-db/forcedeleted", "ops.c1.cleanup.forcedeleted.apps.tmp-0 cleanup/uid-tmp/forcedeleted"} {
		if !strings.Contains(got, want) {
			t.Fatalf("decisions %v, want %s", got, want)
		}
	}
	if v := gaugeValue(t, m.Brake); v != 1 {
		t.Fatalf("brake gauge %v, want 1 (4 of 6 nodes still not Ready)", v)
	}
	if _, err := client.CoreV1().Pods("apps").Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("web-1, on an Unknown node without the taint, was deleted under the brake: %v", err)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := testPolicy()
	pods := []*events.PodState{pod(), pod(failed("Evicted")), pod(deleting(t0.Add(-time.Hour))), pod(failed("Error"))}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Decide(pods[i%len(pods)], Facts{Now: t0})
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
	act := NewActuator(fake.NewClientset(), &actuatetest.Publisher{}, &record.FakeRecorder{}, NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute), Now: func() time.Time { return t0 }, WindowNow: func() time.Time { return t0 },
	})
	ctl := NewController(testPolicy(), act, nil, time.Hour, 1, func() time.Time { return t0 }, zerolog.Nop())
	ctl.countNodes(state) // what Run does first
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ctl.EnqueueAll(state)
		for ctl.Len() > 0 {
			ctl.processNext(ctx, state)
		}
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestControllerNotReadyTimeoutRequeues: with statefulNotReadyTimeout, a held
// StatefulSet pod is looked at again when the timeout releases it, with no
// node change and no tick (the tick interval is an hour here).
func TestControllerNotReadyTimeoutRequeues(t *testing.T) {
	policy := testPolicy()
	policy.StatefulNotReadyTimeout = time.Minute
	dts := time.Now().Add(-10 * time.Minute)
	ts := metav1.NewTime(dts)
	since := metav1.NewTime(time.Now().Add(-time.Minute + 400*time.Millisecond)) // released in 400 ms
	live := livePod(liveSTS, func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: since}}}}
	state := &memState{
		pods: map[string]*events.PodState{"apps/web-1": pod(func(p *events.PodState) {
			p.DeletionTimestamp = &dts
			p.Owner = &events.Owner{Kind: "StatefulSet", Name: "db"}
		})},
		nodes: map[string]*events.NodeState{"n1": liveNode(node)},
	}
	for _, n := range []string{"n2", "n3", "n4"} {
		state.nodes[n] = &events.NodeState{Name: n, Ready: "True"}
	}
	client := fake.NewClientset(live, node)
	pub := &actuatetest.Publisher{}
	act := NewActuator(client, pub, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: policy, Limiter: actuate.NewWindow(10, time.Minute),
	})
	ctl := NewController(policy, act, nil, time.Hour, 1, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	if got := waitPublished(t, pub, 1); got[0] != "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown" {
		t.Fatalf("first decision %v", got)
	}
	gone := waitGone(t, client, "web-1", 3*time.Second)
	if due := since.Add(time.Minute); gone.Before(due) {
		t.Fatalf("force-deleted %v before statefulNotReadyTimeout released it", due.Sub(gone))
	}
}

// TestControllerNodeDeletionReleases: a StatefulSet pod held on an Unknown
// node is force-deleted once the node object is deleted.
func TestControllerNodeDeletionReleases(t *testing.T) {
	dts := time.Now().Add(-10 * time.Minute)
	ts := metav1.NewTime(dts)
	live := livePod(liveSTS, func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	state := &memState{
		pods: map[string]*events.PodState{"apps/web-1": pod(func(p *events.PodState) {
			p.DeletionTimestamp = &dts
			p.Owner = &events.Owner{Kind: "StatefulSet", Name: "db"}
		})},
		nodes: map[string]*events.NodeState{"n1": liveNode(node)},
	}
	for _, n := range []string{"n2", "n3", "n4"} {
		state.nodes[n] = &events.NodeState{Name: n, Ready: "True"}
	}
	client := fake.NewClientset(live, node)
	pub := &actuatetest.Publisher{}
	act := NewActuator(client, pub, record.NewFakeRecorder(10), NewMetrics(nil), zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: testPolicy(), Limiter: actuate.NewWindow(10, time.Minute),
	})
	ctl := NewController(testPolicy(), act, nil, time.Hour, 1, nil, zerolog.Nop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, state) }()
	defer func() { cancel(); <-done }()

	if got := waitPublished(t, pub, 1); got[0] != "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown" {
		t.Fatalf("first decision %v", got)
	}
	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	state.mu.Lock()
	old := state.nodes["n1"]
	delete(state.nodes, "n1")
	state.mu.Unlock()
	ctl.OnNode(old, nil, state)
	waitGone(t, client, "web-1", 3*time.Second)
	for deadline := time.Now().Add(3 * time.Second); ctl.NodeCount().Nodes != 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node count %+v after the deletion, want 3 nodes", ctl.NodeCount())
		}
	}
}

// slowListing is a State whose node listing lasts until a pod was re-read
// from the API (a worker is deciding) or maxListing passed: the race of a
// large cluster's count against the workers, made to lose every time.
type slowListing struct {
	*memState
	reread <-chan struct{}
}

const maxListing = 500 * time.Millisecond

func (s slowListing) Nodes() []*events.NodeState {
	select {
	case <-s.reread:
	case <-time.After(maxListing):
	}
	return s.memState.Nodes()
}

// brakingCluster is the mirror of a cluster with 4 of its 6 nodes Unknown
// (more than the brake's third) and one pod stuck Terminating on them.
func brakingCluster() *memState {
	dts := time.Now().Add(-10 * time.Minute)
	state := &memState{
		pods:  map[string]*events.PodState{"apps/web-1": pod(func(p *events.PodState) { p.DeletionTimestamp = &dts })},
		nodes: map[string]*events.NodeState{},
	}
	for i := range 6 {
		ready := "Unknown"
		if i%3 == 0 {
			ready = "True"
		}
		name := fmt.Sprintf("n%d", i)
		state.nodes[name] = &events.NodeState{Name: name, Ready: ready}
	}
	return state
}

// stuckLive is the live pod of brakingCluster's stuck pod.
func stuckLive() *corev1.Pod {
	ts := metav1.NewTime(time.Now().Add(-10 * time.Minute))
	return livePod(func(p *corev1.Pod) { p.DeletionTimestamp = &ts; p.Status.Phase = corev1.PodRunning })
}

// TestControllerBrakeAtLeadershipStart: the mirror enqueues every candidate
// while it loads (OnPod), before Controller.Run. A worker that decided
// before Run's first node count saw no nodes (no brake), and the live
// re-check reused that count: the stuck pod was force-deleted at leadership
// start while most of the cluster was not Ready. Run counts first now.
func TestControllerBrakeAtLeadershipStart(t *testing.T) {
	state := brakingCluster()
	r := newRig(t, testPolicy(), false, nil, stuckLive())
	r.act.cfg.Now = time.Now
	reread := make(chan struct{})
	var once sync.Once
	r.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() { close(reread) })
		return false, nil, nil
	})
	ctl := NewController(testPolicy(), r.act, r.metrics, time.Hour, workers, nil, zerolog.Nop())
	ctl.OnPod(nil, state.pods["apps/web-1"]) // the mirror's load, before Run
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx, slowListing{state, reread}) }()
	defer func() { cancel(); <-done }()

	got := waitPublished(t, r.pub, 1)
	for _, w := range r.writes() {
		if w == "delete pods" {
			t.Fatalf("4 of 6 nodes not Ready (brake share 1/3), yet the stuck pod was force-deleted at leadership start; published %v", got)
		}
	}
	if len(got) != 1 || !strings.HasSuffix(got[0], "skipped/MassNodeFailure") {
		t.Fatalf("published %v, want the MassNodeFailure skip", got)
	}
}

// TestControllerDecidesNothingBeforeTheNodeCount: a controller whose nodes
// were never counted (its Run did not start) holds every pod back rather
// than deciding without the brake.
func TestControllerDecidesNothingBeforeTheNodeCount(t *testing.T) {
	state := brakingCluster()
	r := newRig(t, testPolicy(), false, nil, stuckLive())
	r.act.cfg.Now = time.Now
	ctl := NewController(testPolicy(), r.act, r.metrics, time.Hour, workers, nil, zerolog.Nop())
	out, err := ctl.sync(context.Background(), state, "apps/web-1")
	if err != nil || !out.Retry {
		t.Fatalf("sync before the node count: %+v, %v; want a retry", out, err)
	}
	if n := len(r.client.Actions()); n != 0 || len(r.pub.All()) != 0 {
		t.Fatalf("sync before the node count made %d API calls and published %v", n, opsSummary(t, r.pub.All()))
	}
}

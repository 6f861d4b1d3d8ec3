package cordon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// decisions decodes every published message.
func decisions(t *testing.T, p *actuatetest.Publisher) []published {
	t.Helper()
	var out []published
	for _, m := range p.All() {
		var d events.CordonDecision
		ev, err := envelope.Decode(m.Header, m.Data, events.TypeCordon, &d)
		if err != nil {
			t.Fatalf("published message does not decode: %v", err)
		}
		out = append(out, published{Subject: m.Subject, ID: ev.ID, D: d})
	}
	return out
}

type published struct {
	Subject, ID string
	D           events.CordonDecision
}

// fixedFleet is a FleetCounter with set numbers, from the mirror and the API alike.
type fixedFleet Fleet

func (f fixedFleet) Mirror(string) Fleet                                 { return Fleet(f) }
func (f fixedFleet) Live(context.Context, string, string) (Fleet, error) { return Fleet(f), nil }

func apiNode(name string, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "41",
			Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func ours(effects ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Labels[events.LabelAutoCordon] = MarkLabelValue
		b, _ := json.Marshal(Mark{Effects: effects, TaintKeys: []string{events.LabelAutoCordon}, Reason: "test"})
		n.Annotations = map[string]string{events.AnnotationAutoCordon: string(b)}
		for _, e := range effects {
			if e == EffectCordon {
				n.Spec.Unschedulable = true
			} else {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: events.LabelAutoCordon, Effect: corev1.TaintEffectNoSchedule})
			}
		}
	}
}

func withTaint(key string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: "x", Effect: corev1.TaintEffectNoSchedule})
	}
}

// pods builds count running pods on node, plus one Succeeded pod that must not count.
func pods(node string, count int) []runtime.Object {
	var out []runtime.Object
	for i := 0; i <= count; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("%s-p%d", node, i)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if i == count {
			p.Status.Phase = corev1.PodSucceeded
		}
		out = append(out, p)
	}
	return out
}

type harness struct {
	client *fake.Clientset
	pub    *actuatetest.Publisher
	rec    *record.FakeRecorder
	ledger *Ledger
	m      *Metrics
	act    *Actuator
}

func newHarness(t *testing.T, policy Policy, dryRun bool, fleet Fleet, objs ...runtime.Object) *harness {
	t.Helper()
	h := &harness{client: fake.NewClientset(objs...), pub: &actuatetest.Publisher{}, rec: record.NewFakeRecorder(100),
		ledger: NewLedger(dryRun), m: NewMetrics(nil)}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.act = NewActuator(h.client, h.pub, h.rec, h.ledger, fixedFleet(fleet), ActuatorConfig{
		Cluster: "prod", Policy: policy, DryRun: dryRun, Identity: "replica-a",
		Now: func() time.Time { return now },
	}, h.m, zerolog.Nop())
	h.act.StartTerm(Fleet{listed: true}) // the term's start count, as Controller.Run takes it
	return h
}

// mirrorOf is the state the mirror would hold for an API node with a count.
func mirrorOf(n *corev1.Node, count int) *events.NodeState { return stateFromNode(n, count) }

func (h *harness) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := h.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *harness) writes() []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range h.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" {
			out = append(out, a)
		}
	}
	return out
}

func TestActuatorWrites(t *testing.T) {
	taintPolicy := seedPolicy("taint")
	taintPolicy.IgnoreTaintKeys = []string{"dedicated"} // a placement taint, not a person's hold
	tests := []struct {
		name       string
		policy     Policy
		node       *corev1.Node
		livePods   int
		mirrorPods int
		verb       string
		check      func(t *testing.T, n *corev1.Node)
	}{
		{"cordon at maxPods", seedPolicy("cordon"), apiNode("a"), 100, 100, VerbCordoned, func(t *testing.T, n *corev1.Node) {
			if !n.Spec.Unschedulable || n.Labels[events.LabelAutoCordon] != MarkLabelValue {
				t.Fatalf("not cordoned and marked: %+v %v", n.Spec, n.Labels)
			}
			m, ok := readMark(n.Annotations)
			if !ok || m.Pods != 100 || m.MaxPods != 100 || m.By != "replica-a" || m.Effects[0] != EffectCordon {
				t.Fatalf("mark annotation = %+v", n.Annotations)
			}
		}},
		{"taint at maxPods keeps other taints", taintPolicy, apiNode("a", withTaint("dedicated")), 120, 120, VerbCordoned, func(t *testing.T, n *corev1.Node) {
			if n.Spec.Unschedulable || len(n.Spec.Taints) != 2 || n.Spec.Taints[0].Key != "dedicated" ||
				n.Spec.Taints[1].Key != events.LabelAutoCordon || n.Spec.Taints[1].Effect != corev1.TaintEffectNoSchedule {
				t.Fatalf("taints = %+v unschedulable=%v", n.Spec.Taints, n.Spec.Unschedulable)
			}
		}},
		{"uncordon at minPods removes the mark", seedPolicy("cordon"), apiNode("a", ours(EffectCordon)), 90, 90, VerbUncordoned, func(t *testing.T, n *corev1.Node) {
			_, labelled := n.Labels[events.LabelAutoCordon]
			_, annotated := n.Annotations[events.AnnotationAutoCordon]
			if n.Spec.Unschedulable || labelled || annotated {
				t.Fatalf("not released: %+v %v %v", n.Spec, n.Labels, n.Annotations)
			}
		}},
		{"untaint removes only our taint", taintPolicy, apiNode("a", withTaint("dedicated"), ours(EffectTaint)), 10, 10, VerbUncordoned, func(t *testing.T, n *corev1.Node) {
			if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "dedicated" {
				t.Fatalf("taints = %+v", n.Spec.Taints)
			}
		}},
		{"release undoes what the mark lists, not the current mode", taintPolicy, apiNode("a", ours(EffectCordon)), 0, 0, VerbUncordoned, func(t *testing.T, n *corev1.Node) {
			if n.Spec.Unschedulable {
				t.Fatal("cordon applied in cordon mode was not lifted after a switch to taint mode")
			}
		}},
	}
	for _, path := range readPaths {
		for _, tc := range tests {
			t.Run(path.name+"/"+tc.name, func(t *testing.T) {
				objs := append([]runtime.Object{tc.node}, pods(tc.node.Name, tc.livePods)...)
				h := newHarness(t, tc.policy, false, Fleet{Held: 0, Managed: 10}, objs...)
				state := mirrorOf(tc.node, tc.mirrorPods)
				path.use(h, state)
				marked := h.ledger.Marked(state)
				d := Evaluate(tc.policy, state, marked)
				if _, err := h.act.Apply(context.Background(), state, marked, d); err != nil {
					t.Fatal(err)
				}
				tc.check(t, h.node(t, tc.node.Name))
				// One patch, carrying the resourceVersion precondition.
				w := h.writes()
				if len(w) != 1 || w[0].GetVerb() != "patch" {
					t.Fatalf("writes = %v", w)
				}
				patch := string(w[0].(k8stesting.PatchAction).GetPatch())
				if !strings.Contains(patch, `"resourceVersion":"41"`) || !strings.Contains(patch, `"uid":"uid-a"`) {
					t.Fatalf("patch lacks its preconditions: %s", patch)
				}
				msgs := decisions(t, h.pub)
				if len(msgs) != 1 {
					t.Fatalf("published %d messages, want 1", len(msgs))
				}
				got := msgs[0]
				if got.Subject != "ops.prod.cordon."+tc.verb+".a" || got.ID != "cordon/uid-a/"+tc.verb+"/41" ||
					got.D.Pods != tc.livePods || got.D.Node != "a" || got.D.Replica != "replica-a" {
					t.Fatalf("published %+v", got)
				}
				select {
				case ev := <-h.rec.Events:
					if !strings.HasPrefix(ev, "Normal Opswire") {
						t.Fatalf("event %q", ev)
					}
				default:
					t.Fatal("no Kubernetes Event recorded")
				}
				// The ledger knows the new mark before the mirror shows it.
				if h.ledger.Marked(state) != (tc.verb == VerbCordoned) {
					t.Fatal("ledger does not reflect the write")
				}
			})
		}
	}
}

func TestActuatorReverification(t *testing.T) {
	tests := []struct {
		name       string
		node       *corev1.Node
		mirror     func(*corev1.Node) *events.NodeState
		livePods   int
		wantStale  float64
		wantErrMsg string
	}{
		{"recount below max: no cordon", apiNode("a"), func(n *corev1.Node) *events.NodeState { return mirrorOf(n, 100) }, 99, 1, ""},
		{"node replaced (uid differs)", apiNode("a"), func(n *corev1.Node) *events.NodeState {
			s := mirrorOf(n, 100)
			s.UID = "old-uid"
			return s
		}, 100, 1, ""},
		{"node deleted", nil, func(*corev1.Node) *events.NodeState { return mirrorOf(apiNode("a"), 100) }, 0, 1, ""},
		{"a person cordoned it meanwhile", apiNode("a", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
			func(n *corev1.Node) *events.NodeState { s := mirrorOf(n, 100); s.Unschedulable = false; return s }, 100, 1, ""},
		{"donotcordon added meanwhile", apiNode("a", func(n *corev1.Node) { n.Labels[events.LabelDoNotCordon] = "" }),
			func(n *corev1.Node) *events.NodeState { s := mirrorOf(apiNode("a"), 100); return s }, 100, 1, ""},
	}
	for _, path := range readPaths {
		for _, tc := range tests {
			t.Run(path.name+"/"+tc.name, func(t *testing.T) {
				var objs []runtime.Object
				if tc.node != nil {
					objs = append(objs, tc.node)
				}
				objs = append(objs, pods("a", tc.livePods)...)
				h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, objs...)
				state := tc.mirror(tc.node)
				path.use(h, state)
				d := Evaluate(seedPolicy("cordon"), state, false)
				if d.Action != ActionCordon {
					t.Fatalf("test setup: mirror decision %s", d.Action)
				}
				if _, err := h.act.Apply(context.Background(), state, false, d); err != nil {
					t.Fatal(err)
				}
				if w := h.writes(); len(w) != 0 {
					t.Fatalf("wrote %v", w)
				}
				if n := len(decisions(t, h.pub)); n != 0 {
					t.Fatalf("published %d messages", n)
				}
				if got := testutil.ToFloat64(h.m.Stale); got != tc.wantStale {
					t.Fatalf("stale = %v", got)
				}
			})
		}
	}
}

func TestActuatorDryRun(t *testing.T) {
	for _, path := range readPaths {
		t.Run(path.name, func(t *testing.T) { testActuatorDryRun(t, path) })
	}
}

func testActuatorDryRun(t *testing.T, path readPath) {
	n := apiNode("a")
	h := newHarness(t, seedPolicy("cordon"), true, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
	state := mirrorOf(n, 100)
	path.use(h, state)
	apply := func(s *events.NodeState) {
		t.Helper()
		s, marked := h.ledger.View(seedPolicy("cordon"), s)
		if _, err := h.act.Apply(context.Background(), s, marked, Evaluate(seedPolicy("cordon"), s, marked)); err != nil {
			t.Fatal(err)
		}
	}
	apply(state)
	apply(state) // the simulated mark holds: no second decision
	if w := h.writes(); len(w) != 0 {
		t.Fatalf("dry run wrote %v", w)
	}
	if got := h.node(t, "a"); got.Spec.Unschedulable || got.Labels[events.LabelAutoCordon] != "" {
		t.Fatal("dry run changed the node")
	}
	msgs := decisions(t, h.pub)
	if len(msgs) != 1 || msgs[0].Subject != "ops.prod.cordon.dryrun.a" || msgs[0].D.Action != "cordon" || !msgs[0].D.DryRun {
		t.Fatalf("published %+v", msgs)
	}
	if len(h.rec.Events) != 0 {
		t.Fatal("dry run recorded a Kubernetes Event")
	}
	if got := testutil.ToFloat64(h.m.Cordons.WithLabelValues("cordon", "true")); got != 1 {
		t.Fatalf("dry-run cordons = %v", got)
	}
}

func TestActuatorCapRefusalIsAnnouncedOnce(t *testing.T) {
	n := apiNode("a")
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Held: 2, Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
	state := mirrorOf(n, 100)
	d := Evaluate(seedPolicy("cordon"), state, false)
	for range 3 {
		if _, err := h.act.Apply(context.Background(), state, false, d); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.client.Actions()) != 0 {
		t.Fatalf("a refused action touched the API: %v", h.client.Actions())
	}
	msgs := decisions(t, h.pub)
	if len(msgs) != 1 {
		t.Fatalf("refusal published %d times, want once", len(msgs))
	}
	got := msgs[0]
	if got.Subject != "ops.prod.cordon.skipped.a" || got.D.Code != CodeCapReached || got.D.Held != 2 || got.D.Cap != 2 ||
		got.D.Managed != 10 || !strings.Contains(got.D.Reason, "maxCordonedPercent") {
		t.Fatalf("refusal %+v", got)
	}
	if got := testutil.ToFloat64(h.m.Refusals.WithLabelValues(CodeCapReached)); got != 3 {
		t.Fatalf("refusals metric = %v, want 3", got)
	}
	// The condition clears (count fell), then returns: a new episode is announced again.
	if _, err := h.act.Apply(context.Background(), state, false, Decision{Action: ActionNone}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.act.Apply(context.Background(), state, false, d); err != nil {
		t.Fatal(err)
	}
	msgs = decisions(t, h.pub)
	if len(msgs) != 2 || msgs[0].ID == msgs[1].ID {
		t.Fatalf("second episode: %+v", msgs)
	}
}

func TestActuatorWriteErrors(t *testing.T) {
	tests := []struct {
		name          string
		err           error
		wantRetry     bool // quietly, without an error
		wantPublished int
	}{
		{"conflict is retried quietly", apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "a", errors.New("modified")), true, 0},
		{"forbidden is announced as failed", apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "a", errors.New("rbac")), false, 1},
	}
	for _, path := range readPaths {
		for _, tc := range tests {
			t.Run(path.name+"/"+tc.name, func(t *testing.T) {
				n := apiNode("a")
				h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
				h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tc.err })
				state := mirrorOf(n, 100)
				path.use(h, state)
				d := Evaluate(seedPolicy("cordon"), state, false)
				for range 2 {
					out, err := h.act.Apply(context.Background(), state, false, d)
					if (err == nil) != tc.wantRetry || out.Retry != tc.wantRetry {
						t.Fatalf("Apply = %+v, %v", out, err)
					}
				}
				msgs := decisions(t, h.pub)
				if len(msgs) != tc.wantPublished {
					t.Fatalf("published %d, want %d", len(msgs), tc.wantPublished)
				}
				if tc.wantPublished > 0 && (msgs[0].Subject != "ops.prod.cordon.failed.a" || msgs[0].D.Error == "" || msgs[0].D.Severity != events.SeverityCritical) {
					t.Fatalf("failure message %+v", msgs[0])
				}
				if h.ledger.Marked(state) {
					t.Fatal("a failed write was recorded as a mark")
				}
			})
		}
	}
}

func TestActuatorRateLimit(t *testing.T) {
	a, b := apiNode("a"), apiNode("b")
	objs := append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, objs...)
	h.act.cfg.Limiter = actuate.NewWindow(1, time.Minute)
	for i, n := range []*corev1.Node{a, b} {
		s := mirrorOf(n, 100)
		out, err := h.act.Apply(context.Background(), s, false, Evaluate(seedPolicy("cordon"), s, false))
		if err != nil {
			t.Fatal(err)
		}
		if (i == 1) != (out.RequeueAfter > 0) || out.Retry {
			t.Fatalf("node %s: %+v", n.Name, out)
		}
	}
	if got := h.node(t, "b"); got.Spec.Unschedulable {
		t.Fatal("rate-limited node was cordoned")
	}
	if got := testutil.ToFloat64(h.m.Refusals.WithLabelValues("rate-limited")); got != 1 {
		t.Fatalf("rate-limited = %v", got)
	}
}

// TestActuatorRateWindowCountsTheWrites: maxActionsPerMinute 1, and the
// first cordon's intent takes its 1 s bound (NATS slow), so its patch reaches
// the API 1 s after its slot was taken. A second cordon one window after the
// slot was taken must wait: with the slot counted from its taking, it was
// patched 59 s after the first patch, two writes in one minute.
func TestActuatorRateWindowCountsTheWrites(t *testing.T) {
	a, b := apiNode("a"), apiNode("b")
	objs := append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, objs...)
	clock := actuatetest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h.act.cfg.Now = clock.Now
	h.act.cfg.Limiter = actuate.NewWindow(1, time.Minute)
	h.act.cfg.Intents = &actuatetest.SlowIntents{Clock: clock, Delay: time.Second}
	var patchedAt []time.Time
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		patchedAt = append(patchedAt, clock.Now())
		return false, nil, nil
	})
	start := clock.Now()
	for i, n := range []*corev1.Node{a, b} {
		if i == 1 {
			clock.Set(start.Add(time.Minute)) // the first reservation has left the window
		}
		s := mirrorOf(n, 100)
		out, err := h.act.Apply(context.Background(), s, false, Evaluate(seedPolicy("cordon"), s, false))
		if err != nil {
			t.Fatal(err)
		}
		if out.RequeueAfter > 0 {
			break
		}
	}
	if len(patchedAt) == 2 && patchedAt[1].Sub(patchedAt[0]) < time.Minute {
		t.Fatalf("maxActionsPerMinute 1: the API got patches at %v and %v, %v apart", patchedAt[0].Format(time.TimeOnly),
			patchedAt[1].Format(time.TimeOnly), patchedAt[1].Sub(patchedAt[0]))
	}
}

// TestActuatorRateLimitCountsThePatch: a cordon counts in the window from
// its patch, not from when its slot was taken. The first cordon's patch
// reaches the API 1 s after its slot (a slow re-read, intent or API); at 1
// per 3 s the second node's patch still comes 3 s after the first patch (it
// came 2 s after it when the slot was counted from its taking).
func TestActuatorRateLimitCountsThePatch(t *testing.T) {
	const per = 3 * time.Second
	a, b := apiNode("a"), apiNode("b")
	objs := append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, objs...)
	var mu sync.Mutex
	now := h.act.cfg.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	h.act.cfg.Now = clock
	h.act.cfg.Limiter = actuate.NewWindow(1, per)
	var patches []time.Time
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if len(patches) == 0 {
			now = now.Add(time.Second) // the first patch is slow to come
		}
		patches = append(patches, now)
		return false, nil, nil
	})
	for _, n := range []*corev1.Node{a, b} {
		s := mirrorOf(n, 100)
		for range 3 {
			out, err := h.act.Apply(context.Background(), s, false, Evaluate(seedPolicy("cordon"), s, false))
			if err != nil {
				t.Fatal(err)
			}
			if out.RequeueAfter == 0 {
				break
			}
			mu.Lock()
			now = now.Add(out.RequeueAfter) // what the controller's AddAfter does
			mu.Unlock()
		}
	}
	if len(patches) != 2 {
		t.Fatalf("%d patches, want 2", len(patches))
	}
	if gap := patches[1].Sub(patches[0]); gap < per {
		t.Fatalf("cap 1 per %v, but the two patches reached the API %v apart", per, gap)
	}
}

// TestActuatorRecountFreshness: the recount asks for a list at least as new
// as the watcher's count (served from the API server's cache); without that
// resourceVersion it is a consistent read.
func TestActuatorRecountFreshness(t *testing.T) {
	for _, tc := range []struct {
		name, podsRV, wantRV string
		wantMatch            metav1.ResourceVersionMatch
	}{
		{"watcher's resourceVersion known", "1234", "1234", metav1.ResourceVersionMatchNotOlderThan},
		{"unknown: consistent read", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := apiNode("a")
			h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{node}, pods("a", 100)...)...)
			state := mirrorOf(node, 100)
			state.PodsResourceVersion = tc.podsRV
			if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
				t.Fatal(err)
			}
			var lists []metav1.ListOptions
			for _, a := range h.client.Actions() {
				if l, ok := a.(k8stesting.ListActionImpl); ok {
					lists = append(lists, l.GetListOptions())
				}
			}
			if len(lists) != 1 {
				t.Fatalf("%d lists, want 1", len(lists))
			}
			o := lists[0]
			if o.ResourceVersion != tc.wantRV || o.ResourceVersionMatch != tc.wantMatch || o.FieldSelector != recountSelector("a") {
				t.Fatalf("list options %+v", o)
			}
			if !h.node(t, "a").Spec.Unschedulable {
				t.Fatal("not cordoned")
			}
		})
	}
}

// TestActuatorDryRunRefusalIdIsItsOwn: a dry-run replica (own Lease) runs
// beside the real one; both refuse the same node at the same version for the
// cap. Their skipped messages go to the same subject; with the same
// Nats-Msg-Id OPS would store the first and drop the other as a duplicate.
func TestActuatorDryRunRefusalIdIsItsOwn(t *testing.T) {
	want := map[bool]string{false: "cordon/uid-a/skipped/41/1", true: "cordon/uid-a/skipped/dryrun/41/1"}
	for _, dry := range []bool{false, true} {
		n := apiNode("a")
		h := newHarness(t, seedPolicy("cordon"), dry, Fleet{Held: 2, Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
		state := mirrorOf(n, 100)
		if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
			t.Fatal(err)
		}
		msgs := decisions(t, h.pub)
		if len(msgs) != 1 || msgs[0].D.Verb != VerbSkipped || msgs[0].Subject != "ops.prod.cordon.skipped.a" || msgs[0].ID != want[dry] {
			t.Fatalf("dryRun=%v: published %+v, want one skipped with id %s", dry, msgs, want[dry])
		}
	}
}

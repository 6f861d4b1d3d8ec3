package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

const (
	ns       = "soak"
	nodes    = 5
	capNodes = 2
	// The person's taint and the label that keeps opswire off a pod.
	personTaintKey = "soak.example/maintenance"
	optOut         = "opswire.io/ignore"
	outOfService   = "node.kubernetes.io/out-of-service"
)

// overrides are the soak's changes to deploy/base/config.yml: short timings,
// thresholds the workload crosses often, a cap of two marks.
const overrides = `
controller: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 200ms}
autoCordon: {interval: 2s, maxPods: 6, minPods: 2, maxCordonedNodes: 2, maxCordonedPercent: 100, capCounts: marks, maxActionsPerMinute: 600}
delException: {interval: 2s, terminatingTimeout: 3s, maxDeletionsPerMinute: 600}
sendReport: {schedule: "@every 15s", total: 5}
notifier: {groupWait: 200ms, groupInterval: 1s, retryInitial: 100ms, requestTimeout: 2s, ackWait: 5s}
`

// TestSoak runs the services under a seeded workload and fault schedule for
// SOAK_DURATION, then checks the invariants (docs/soak.md). SOAK_SEED
// replays a seed.
func TestSoak(t *testing.T) {
	durEnv := os.Getenv("SOAK_DURATION")
	if durEnv == "" {
		t.Skip("SOAK_DURATION is not set (make soak)")
	}
	dur, err := time.ParseDuration(durEnv)
	if err != nil {
		t.Fatalf("SOAK_DURATION=%q: %v", durEnv, err)
	}
	seed := rand.Uint64()
	if s := os.Getenv("SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", s, err)
		}
	}
	fmt.Printf("soak: seed %d, duration %v (replay: make soak SOAK_SEED=%d SOAK_DURATION=%v)\n", seed, dur, seed, dur)
	t.Logf("seed %d", seed)

	s := startSoak(t, seed)
	s.faults = schedule(rand.New(rand.NewPCG(seed, 2)), dur, s.replicaNames())
	for _, f := range s.faults {
		t.Logf("fault schedule: %s", f)
	}
	s.run(dur)
	s.heal()
	s.settle(2 * time.Minute)

	audit, err := harness.ReadAuditLog(s.cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	ops := s.readOps()
	vs := Check(Rules{CordonUser: "system:serviceaccount:opswire:opswire-cordon", CleanupUser: "system:serviceaccount:opswire:opswire-cleanup",
		Cap: capNodes, TaintKey: "node.kubernetes.io/autocordon", OptOutLabel: optOut}, audit, ops)
	report := s.summary(audit, ops) + "\n" + Report(seed, vs)
	fmt.Println(report)
	t.Log(report)
	if len(vs) > 0 {
		t.Fail()
	}
}

// replica is one service process, restarted under a new incarnation id.
type replica struct {
	svc, name string
	opts      harness.ServiceOptions
	proxy     *harness.APIProxy // nil: straight to the API server (watcher) or none (notifier)

	mu      sync.Mutex
	proc    *harness.Process
	inc     int
	stopped bool
	armed   bool // kill at the next successful write's answer (a lost answer)
	lost    int  // answers lost so far
	logf    func(string, ...any)
}

type soak struct {
	t       *testing.T
	seed    uint64
	cp      *harness.ControlPlane
	c       kubernetes.Interface
	nats    *harness.NATS
	bot     *feishutest.Server
	rng     *rand.Rand
	start   time.Time
	seq     int
	reps    []*replica
	faults  []fault
	actions map[string]int
	errs    map[string]int
	// The person's view: nodes made unreachable.
	unreachable map[string]bool
}

func startSoak(t *testing.T, seed uint64) *soak {
	cp := harness.StartControlPlane(t, harness.WithAuditLog())
	s := &soak{t: t, seed: seed, cp: cp, c: cp.Client, rng: rand.New(rand.NewPCG(seed, 1)),
		actions: map[string]int{}, errs: map[string]int{}, unreachable: map[string]bool{}}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// deploy/'s ServiceAccounts and RBAC: each service writes as itself.
	var access []*unstructured.Unstructured
	for _, o := range harness.KustomizeBuild(t, filepath.Join(root, "deploy", "overlays", "dev")) {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			access = append(access, o)
		}
	}
	harness.ServerSideApply(t, cp.Config, access)
	cp.StartControllers(t, harness.ControllerOptions{Scheduler: true, NodeMonitorPeriod: time.Second,
		NodeMonitorGracePeriod: 10 * time.Second})
	harness.CreateNamespace(t, s.c, ns)
	for i := 0; i < nodes; i++ {
		harness.CreateNode(t, s.c, harness.Node(fmt.Sprintf("soak-n%d", i), nil))
	}
	s.createWorkloads()

	s.nats = harness.StartNATS(t)
	base, err := os.ReadFile(filepath.Join(root, "deploy", "base", "config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := harness.WriteConfig(t, merged(t, string(base), overrides))
	s.bot = feishutest.NewServer()
	t.Cleanup(s.bot.Close)
	botURL := s.bot.AddBot("soak-bot", feishutest.Bot{Secret: "soak-secret"})

	kc := func(svc string) string { return cp.ServiceAccountKubeconfig(t, "opswire", "opswire-"+svc) }
	add := func(svc, name string, proxied bool, env ...string) {
		r := &replica{svc: svc, name: name, opts: harness.ServiceOptions{Config: cfg, NATSURL: s.nats.URL, Env: env}, logf: t.Logf}
		if svc != "notifier" {
			r.opts.Kubeconfig = kc(svc)
		}
		if proxied {
			r.proxy = harness.StartAPIProxy(t, cp)
			r.opts.Kubeconfig = r.proxy.Kubeconfig(t, r.opts.Kubeconfig)
			r.proxy.OnAnswer(func(req harness.APIRequest) { r.lostAnswer(req) })
		}
		s.reps = append(s.reps, r)
	}
	add("watcher", "watcher-a", false)
	add("cordon", "cordon-a", true)
	add("cordon", "cordon-b", true)
	add("cleanup", "cleanup-a", true)
	add("cleanup", "cleanup-b", true)
	add("notifier", "notifier-a", false, "OPSWIRE_FEISHU_URL="+botURL, "OPSWIRE_FEISHU_SECRET=soak-secret")
	for _, r := range s.reps {
		s.startReplica(r)
		if r.svc == "watcher" {
			r.proc.WaitReady(t, 60*time.Second) // it creates the streams
		}
	}
	for _, r := range s.reps {
		r.proc.WaitReady(t, 60*time.Second)
	}
	s.start = time.Now()
	return s
}

// merged is base with the overrides deep-merged in.
func merged(t *testing.T, base, over string) string {
	var b, o map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(over), &o); err != nil {
		t.Fatal(err)
	}
	var merge func(b, o map[string]any)
	merge = func(b, o map[string]any) {
		for k, v := range o {
			if bm, ok := b[k].(map[string]any); ok {
				if om, ok := v.(map[string]any); ok {
					merge(bm, om)
					continue
				}
			}
			b[k] = v
		}
	}
	merge(b, o)
	out, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func (s *soak) startReplica(r *replica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inc++
	o := r.opts
	o.ID = r.name
	if r.inc > 1 {
		o.ID = fmt.Sprintf("%s-r%d", r.name, r.inc)
	}
	r.proc = harness.StartService(s.t, r.svc, o)
	r.stopped = false
}

// lostAnswer is the proxy's hook: an armed replica is SIGKILLed when the
// answer to a successful action (node PATCH, pod DELETE) arrives, before it
// can read it.
func (r *replica) lostAnswer(req harness.APIRequest) {
	// Only opswire's actions: a node PATCH or a pod DELETE (or the finalizer
	// PATCH before one), not its Events or Lease renewals.
	action := (req.Method == "PATCH" || req.Method == "DELETE") &&
		(strings.Contains(req.Path, "/nodes/") || strings.Contains(req.Path, "/pods/"))
	if !action || req.Status < 200 || req.Status >= 300 {
		return
	}
	r.mu.Lock()
	armed, p := r.armed, r.proc
	r.armed = false
	r.mu.Unlock()
	if armed {
		p.Kill()
		r.mu.Lock()
		r.lost++
		r.mu.Unlock()
		r.logf("lost answer: %s killed on the answer %d to %s %s", r.name, req.Status, req.Method, req.Path)
	}
}

func (s *soak) replicaNames() []string {
	var out []string
	for _, r := range s.reps {
		out = append(out, r.name)
	}
	return out
}

func (s *soak) replica(name string) *replica {
	for _, r := range s.reps {
		if r.name == name {
			return r
		}
	}
	return nil
}

func (s *soak) createWorkloads() {
	ctx := context.Background()
	labels := map[string]string{"app": "soak-agent"}
	tmpl := func(l map[string]string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}}}
	}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "soak-agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: tmpl(labels)}}
	if _, err := s.c.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
	db := map[string]string{"app": "soak-db"}
	three := int32(3)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "soak-db", Namespace: ns},
		Spec: appsv1.StatefulSetSpec{Replicas: &three, ServiceName: "soak-db", Selector: &metav1.LabelSelector{MatchLabels: db},
			Template: tmpl(db), PodManagementPolicy: appsv1.ParallelPodManagement}}
	if _, err := s.c.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// fault is one entry of the schedule: at offset at, kind on target, healed
// dur later.
type fault struct {
	at     time.Duration
	kind   string // kill, stop, nats, cut, lost
	target string
	dur    time.Duration
}

func (f fault) String() string {
	return fmt.Sprintf("+%v %s %s for %v", f.at.Round(time.Millisecond), f.kind, f.target, f.dur.Round(time.Millisecond))
}

// schedule draws the faults of a run from rng: one every 4 to 12 s, at most
// one per target at a time.
func schedule(rng *rand.Rand, total time.Duration, targets []string) []fault {
	var out []fault
	busy := map[string]time.Duration{}
	proxied := func(n string) bool { return strings.HasPrefix(n, "cordon") || strings.HasPrefix(n, "cleanup") }
	for at := 5 * time.Second; at < total-10*time.Second; at += time.Duration(4000+rng.IntN(8000)) * time.Millisecond {
		var f fault
		switch k := rng.IntN(10); {
		case k < 3:
			f = fault{kind: "kill", target: targets[rng.IntN(len(targets))], dur: time.Duration(500+rng.IntN(4000)) * time.Millisecond}
		case k < 5:
			f = fault{kind: "stop", target: targets[rng.IntN(len(targets))], dur: time.Duration(1000+rng.IntN(7000)) * time.Millisecond}
		case k < 6:
			f = fault{kind: "nats", target: "nats", dur: time.Duration(1000+rng.IntN(5000)) * time.Millisecond}
		case k < 8:
			f = fault{kind: "cut", target: targets[1+rng.IntN(4)], dur: time.Duration(2000+rng.IntN(8000)) * time.Millisecond}
		default:
			f = fault{kind: "lost", target: targets[1+rng.IntN(4)], dur: 15 * time.Second}
		}
		if (f.kind == "cut" || f.kind == "lost") && !proxied(f.target) {
			continue
		}
		if busy[f.target] > at {
			continue
		}
		f.at = at
		busy[f.target] = at + f.dur + time.Second
		out = append(out, f)
	}
	return out
}

// event is a fault's start or its healing, at an offset of the run.
type event struct {
	at   time.Duration
	heal bool
	f    fault
}

// run interleaves the workload with the fault schedule until dur has passed.
func (s *soak) run(dur time.Duration) {
	var evs []event
	for _, f := range s.faults {
		evs = append(evs, event{at: f.at, f: f}, event{at: f.at + f.dur, heal: true, f: f})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	for time.Since(s.start) < dur {
		for len(evs) > 0 && evs[0].at <= time.Since(s.start) {
			s.apply(evs[0])
			evs = evs[1:]
		}
		s.step()
		time.Sleep(time.Duration(150+s.rng.IntN(500)) * time.Millisecond)
	}
	for _, e := range evs { // heal whatever is still open
		if e.heal {
			s.apply(e)
		}
	}
}

func (s *soak) apply(e event) {
	f := e.f
	s.t.Logf("+%v %s %s (heal %v)", time.Since(s.start).Round(time.Millisecond), f.kind, f.target, e.heal)
	if f.kind == "nats" {
		if e.heal {
			s.nats.Restart(s.t)
		} else {
			s.nats.Stop()
		}
		return
	}
	r := s.replica(f.target)
	switch f.kind {
	case "kill":
		if e.heal {
			s.restartIfDead(r)
		} else {
			r.mu.Lock()
			p := r.proc
			r.mu.Unlock()
			p.Kill()
		}
	case "stop":
		r.mu.Lock()
		p := r.proc
		r.stopped = !e.heal
		r.mu.Unlock()
		if e.heal {
			_ = p.Signal(syscall.SIGCONT)
		} else {
			_ = p.Signal(syscall.SIGSTOP)
		}
	case "cut":
		if e.heal {
			r.proxy.Restore()
		} else {
			r.proxy.Cut()
		}
	case "lost":
		r.mu.Lock()
		r.armed = !e.heal
		r.mu.Unlock()
		if e.heal {
			s.restartIfDead(r)
		}
	}
}

func (s *soak) restartIfDead(r *replica) {
	r.mu.Lock()
	dead := r.proc.Exited()
	r.mu.Unlock()
	if dead {
		s.startReplica(r)
	}
}

// heal ends every fault: NATS up, no proxy cut, no replica stopped or dead.
func (s *soak) heal() {
	if s.nats.Server() == nil {
		s.nats.Restart(s.t)
	}
	for _, r := range s.reps {
		if r.proxy != nil {
			r.proxy.Restore()
		}
		r.mu.Lock()
		r.armed = false
		p := r.proc
		r.mu.Unlock()
		_ = p.Signal(syscall.SIGCONT)
		s.restartIfDead(r)
	}
}

// settle waits until OPS has been quiet for 20 s (at most max): the
// services have caught up with the last of the workload and the faults.
func (s *soak) settle(max time.Duration) {
	deadline := time.Now().Add(max)
	var last uint64
	quiet := time.Now()
	for time.Now().Before(deadline) {
		if n := s.opsCount(); n != last {
			last, quiet = n, time.Now()
		}
		if time.Since(quiet) > 20*time.Second {
			return
		}
		time.Sleep(time.Second)
	}
	s.t.Logf("OPS still growing after %v", max)
}

func (s *soak) opsCount() uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.nats.JS.Stream(ctx, "OPS")
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.LastSeq
}

// readOps reads every OPS message stored.
func (s *soak) readOps() []OpsMsg {
	total := s.opsCount()
	col := harness.Collect(s.t, s.nats.JS, "OPS", "ops.>", jetstream.DeliverAllPolicy)
	harness.Eventually(s.t, time.Minute, "every OPS message read", func() bool {
		all := col.All()
		return len(all) > 0 && all[len(all)-1].Seq >= total
	})
	var out []OpsMsg
	for _, m := range col.All() {
		out = append(out, OpsMsg{Subject: m.Subject, Seq: m.Seq, Data: m.Data})
	}
	return out
}

// summary counts what the run did, for the report.
func (s *soak) summary(audit []harness.AuditEntry, ops []OpsMsg) string {
	kinds := map[string]int{}
	for _, f := range s.faults {
		kinds[f.kind]++
	}
	for _, r := range s.reps {
		r.mu.Lock()
		kinds["lost (fired)"] += r.lost
		r.mu.Unlock()
	}
	writes := map[string]int{}
	for _, e := range audit {
		if strings.HasPrefix(e.User, "system:serviceaccount:opswire:") && e.Succeeded() {
			writes[strings.TrimPrefix(e.User, "system:serviceaccount:opswire:")+" "+e.Verb+" "+e.Resource+sub(e.Subresource)]++
		}
	}
	verbs := map[string]int{}
	for _, m := range ops {
		p := strings.Split(m.Subject, ".")
		if len(p) >= 4 {
			verbs[p[2]+"."+p[3]]++
		}
	}
	return fmt.Sprintf("soak seed %d ran %v\n  faults: %s\n  workload: %s\n  workload errors: %s\n  opswire writes (audit log, 2xx): %s\n  OPS: %s\n  cards received: %d",
		s.seed, time.Since(s.start).Round(time.Second), counts(kinds), counts(s.actions), counts(s.errs), counts(writes), counts(verbs),
		len(s.bot.Cards("soak-bot")))
}

func sub(s string) string {
	if s == "" {
		return ""
	}
	return "/" + s
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []string
	for _, k := range keys {
		b = append(b, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(b) == 0 {
		return "none"
	}
	return strings.Join(b, ", ")
}

// ---- the workload: a person and a cluster's churn ----

func (s *soak) node() string { return fmt.Sprintf("soak-n%d", s.rng.IntN(nodes)) }

func (s *soak) name(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s-%d", prefix, s.seq)
}

func (s *soak) did(action string, err error) {
	if err != nil {
		s.errs[action]++
		s.t.Logf("+%v %s: %v", time.Since(s.start).Round(time.Millisecond), action, err)
		return
	}
	s.actions[action]++
}

var weights = []struct {
	action string
	w      int
}{
	{"fill", 8}, {"empty", 6}, {"evicted", 3}, {"stuck", 3}, {"cordon", 1}, {"uncordon", 2}, {"taint", 1},
	{"donotcordon", 1}, {"unreachable", 1}, {"outofservice", 1}, {"drain", 2}, {"job", 1}, {"deleteowned", 2},
	{"failowned", 1}, {"scale", 1},
}

// step does one action of the workload, drawn from the seed.
func (s *soak) step() {
	total := 0
	for _, w := range weights {
		total += w.w
	}
	k := s.rng.IntN(total)
	var action string
	for _, w := range weights {
		if k < w.w {
			action = w.action
			break
		}
		k -= w.w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node := s.node()
	switch action {
	case "fill":
		pods := s.pods(ctx, node, "plain")
		if len(pods) > 12 {
			s.did("empty", s.deletePlain(ctx, pods, 1+s.rng.IntN(4), 0))
			return
		}
		for i, n := 0, 1+s.rng.IntN(4); i < n; i++ {
			p := harness.Pod(ns, s.name("p"), node)
			p.Labels = map[string]string{"soak": "plain"}
			_, err := s.c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			s.did("fill", err)
		}
	case "empty":
		s.did("empty", s.deletePlain(ctx, s.pods(ctx, node, "plain"), 1+s.rng.IntN(4), 0))
	case "stuck": // a graceful delete no kubelet will finish
		s.did("stuck", s.deletePlain(ctx, s.pods(ctx, node, "plain"), 1, 5))
	case "evicted":
		p := harness.Pod(ns, s.name("ev"), node)
		p.Labels = map[string]string{"soak": "evicted"}
		if s.rng.IntN(6) == 0 {
			p.Labels[optOut] = "true"
		}
		created, err := s.c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err == nil {
			err = s.fail(ctx, created)
		}
		s.did("evicted", err)
	case "cordon":
		s.did("cordon", s.patchNode(ctx, node, `{"spec":{"unschedulable":true}}`))
	case "uncordon":
		s.did("uncordon", s.patchNode(ctx, node, `{"spec":{"unschedulable":null}}`))
	case "taint":
		s.did("taint", s.toggleTaint(ctx, node, personTaintKey, corev1.TaintEffectNoSchedule))
	case "donotcordon":
		n, err := s.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err == nil {
			v := `"true"`
			if _, ok := n.Labels["node.kubernetes.io/donotcordon"]; ok {
				v = "null"
			}
			err = s.patchNode(ctx, node, `{"metadata":{"labels":{"node.kubernetes.io/donotcordon":`+v+`}}}`)
		}
		s.did("donotcordon", err)
	case "unreachable":
		if s.unreachable[node] {
			s.did("reachable", s.reachable(ctx, node))
			delete(s.unreachable, node)
		} else if len(s.unreachable) < 2 {
			s.did("unreachable", s.patchNode(ctx, node, fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, harness.UnreachableAnnotation)))
			s.unreachable[node] = true
		}
	case "outofservice": // a person confirms an unreachable node is down
		var down []string
		for n := range s.unreachable {
			down = append(down, n)
		}
		sort.Strings(down)
		for _, n := range down {
			node, err := s.c.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err == nil && readyOf(node) != corev1.ConditionTrue && !hasTaint(node, outOfService) {
				s.did("outofservice", s.toggleTaint(ctx, n, outOfService, corev1.TaintEffectNoExecute))
			}
			break
		}
	case "drain": // a person evicts two pods of a node (Eviction API)
		pods := s.pods(ctx, node, "")
		s.rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		for i := 0; i < len(pods) && i < 2; i++ {
			err := s.c.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pods[i].Name, Namespace: ns}})
			s.did("drain", err)
		}
	case "job":
		s.did("job", s.job(ctx))
	case "deleteowned": // a graceful delete of a DaemonSet or StatefulSet pod: stuck Terminating
		pods := s.owned(ctx)
		if len(pods) > 0 {
			five := int64(5)
			p := pods[s.rng.IntN(len(pods))]
			s.did("deleteowned", s.c.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &five}))
		}
	case "failowned": // an owned pod evicted by its kubelet
		pods := s.owned(ctx)
		if len(pods) > 0 {
			s.did("failowned", s.fail(ctx, &pods[s.rng.IntN(len(pods))]))
		}
	case "scale":
		r := int32(2 + s.rng.IntN(4))
		_, err := s.c.AppsV1().StatefulSets(ns).Patch(ctx, "soak-db", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, r)), metav1.PatchOptions{})
		s.did("scale", err)
	}
}

// pods lists the non-terminating pods of the soak on node (kind: the soak
// label, "" for any).
func (s *soak) pods(ctx context.Context, node, kind string) []corev1.Pod {
	opts := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	if kind != "" {
		opts.LabelSelector = "soak=" + kind
	}
	list, err := s.c.CoreV1().Pods(ns).List(ctx, opts)
	if err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			out = append(out, p)
		}
	}
	return out
}

// owned lists the DaemonSet, StatefulSet and Job pods that are not
// terminating.
func (s *soak) owned(ctx context.Context) []corev1.Pod {
	list, err := s.c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

func (s *soak) deletePlain(ctx context.Context, pods []corev1.Pod, n int, grace int64) error {
	s.rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	for i := 0; i < n && i < len(pods); i++ {
		if err := s.c.CoreV1().Pods(ns).Delete(ctx, pods[i].Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			return err
		}
	}
	return nil
}

func (s *soak) fail(ctx context.Context, p *corev1.Pod) error {
	p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
	_, err := s.c.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

func (s *soak) patchNode(ctx context.Context, node, patch string) error {
	_, err := s.c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// toggleTaint adds or removes a taint by key (an update: conflicts are the
// person's retry).
func (s *soak) toggleTaint(ctx context.Context, node, key string, effect corev1.TaintEffect) error {
	n, err := s.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var taints []corev1.Taint
	found := false
	for _, tn := range n.Spec.Taints {
		if tn.Key == key {
			found = true
			continue
		}
		taints = append(taints, tn)
	}
	if !found {
		taints = append(taints, corev1.Taint{Key: key, Value: "soak", Effect: effect})
	}
	n.Spec.Taints = taints
	_, err = s.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}

// reachable resumes a node's Lease and posts it Ready, lifting the
// out-of-service taint (harness.MakeReachable, without failing the test).
func (s *soak) reachable(ctx context.Context, node string) error {
	if err := s.patchNode(ctx, node, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, harness.UnreachableAnnotation)); err != nil {
		return err
	}
	n, err := s.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if hasTaint(n, outOfService) {
		if err := s.toggleTaint(ctx, node, outOfService, corev1.TaintEffectNoExecute); err != nil {
			return err
		}
		if n, err = s.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
			return err
		}
	}
	now := metav1.Now()
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Status == corev1.ConditionUnknown {
			c.Status, c.Reason, c.LastHeartbeatTime, c.LastTransitionTime = corev1.ConditionTrue, "KubeletReady", now, now
			if c.Type != corev1.NodeReady {
				c.Status = corev1.ConditionFalse
			}
		}
	}
	_, err = s.c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// job starts a Job of two pods, deleting the oldest beyond three.
func (s *soak) job(ctx context.Context) error {
	zero := int32(0)
	two := int32(2)
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: s.name("job"), Namespace: ns},
		Spec: batchv1.JobSpec{Parallelism: &two, Completions: &two, BackoffLimit: &zero,
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/job:1"}}}}}}
	if _, err := s.c.BatchV1().Jobs(ns).Create(ctx, j, metav1.CreateOptions{}); err != nil {
		return err
	}
	list, err := s.c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) <= 3 {
		return err
	}
	sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].CreationTimestamp.Before(&list.Items[b].CreationTimestamp) })
	bg := metav1.DeletePropagationBackground
	return s.c.BatchV1().Jobs(ns).Delete(ctx, list.Items[0].Name, metav1.DeleteOptions{PropagationPolicy: &bg})
}

func readyOf(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, tn := range n.Spec.Taints {
		if tn.Key == key {
			return true
		}
	}
	return false
}

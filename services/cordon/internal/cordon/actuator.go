package cordon

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// Verbs of ops.<cluster>.cordon.<verb>.<node> (DESIGN §2).
const (
	VerbCordoned   = "cordoned"
	VerbUncordoned = "uncordoned"
	VerbSkipped    = "skipped"
	VerbDryRun     = "dryrun"
	VerbFailed     = "failed"
)

// Kubernetes Event reasons recorded on the node.
const (
	EventCordoned     = "OpswireCordoned"
	EventUncordoned   = "OpswireUncordoned"
	EventRefused      = "OpswireCordonRefused"
	EventActionFailed = "OpswireCordonFailed"
)

// Service is the actor's name in subjects, ce-source and Event sources.
const Service = "cordon"

// ActionSubjects are the OPS subjects of the writes the rate window counts
// (cordons and uncordons; never refusals, failures or dry runs).
func ActionSubjects(cluster string) []string {
	return []string{subject.Ops(cluster, Service, VerbCordoned) + ".>", subject.Ops(cluster, Service, VerbUncordoned) + ".>"}
}

// FleetCounter counts, for the blast-radius cap, the nodes opswire holds and
// the nodes it manages.
type FleetCounter interface {
	Fleet() Fleet
}

// ActuatorConfig holds the actuator's settings.
type ActuatorConfig struct {
	Cluster string
	Policy  Policy
	DryRun  bool
	// Limiter paces writes (autoCordon.maxActionsPerMinute per rateWindow),
	// seeded from OPS at leadership start; nil: unlimited.
	Limiter *actuate.Window
	// Identity of this replica, written into marks and audit messages.
	Identity string
	// APITimeout bounds each API call (actuate.DefaultAPITimeout when 0).
	APITimeout time.Duration
	Now        func() time.Time
}

// Actuator is the one place where the cordon actor writes: to the node (the
// patch), to the cluster's Events, and to the OPS audit log. It follows the
// contract of package actuate (docs/actuate.md).
type Actuator struct {
	client kubernetes.Interface
	audit  actuate.Audit
	rec    record.EventRecorder
	ledger *Ledger
	fleet  FleetCounter
	cfg    ActuatorConfig
	m      *Metrics
	log    zerolog.Logger

	// mu serialises actions: the cap check must see every earlier write.
	mu sync.Mutex
	// announced holds, per node, the refusals and failures published in the
	// current episode, so a condition that persists across ticks is announced once.
	announced *actuate.Announced
	// simSeq numbers the decisions that write nothing (dry-run, refusals) per
	// node: the node's resourceVersion does not change for them, so it alone
	// cannot make their message ids unique.
	simSeq map[string]int
}

// NewActuator builds the actuator. rec may be a record.FakeRecorder in tests.
func NewActuator(client kubernetes.Interface, audit actuate.Audit, rec record.EventRecorder, ledger *Ledger,
	fleet FleetCounter, cfg ActuatorConfig, m *Metrics, log zerolog.Logger) *Actuator {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.APITimeout <= 0 {
		cfg.APITimeout = actuate.DefaultAPITimeout
	}
	return &Actuator{
		client: client, audit: audit, rec: rec, ledger: ledger, fleet: fleet, cfg: cfg, m: m, log: log,
		announced: actuate.NewAnnounced(), simSeq: map[string]int{},
	}
}

// Apply carries out a decision made on the mirror's state of node n, with
// the contract of actuate.Outcome. marked is the mark the decision was made with.
func (a *Actuator) Apply(ctx context.Context, n *events.NodeState, marked bool, d Decision) (actuate.Outcome, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if d.Action == ActionNone {
		a.announced.Reset(n.Name)
		return actuate.Outcome{}, nil
	}
	fleet := a.fleet.Fleet()
	d, ok := Admit(a.cfg.Policy, d, marked, fleet)
	if !ok {
		a.refuse(n, d, fleet)
		return actuate.Outcome{}, nil
	}
	release := func() {}
	if !a.cfg.DryRun && a.cfg.Limiter != nil {
		at := a.cfg.Now()
		if delay := a.cfg.Limiter.Reserve(at); delay > 0 {
			a.m.Refusals.WithLabelValues("rate-limited").Inc()
			a.log.Debug().Str("node", n.Name).Dur("retryIn", delay).Msg("rate limit reached; action deferred")
			return actuate.Outcome{RequeueAfter: delay}, nil
		}
		release = func() { a.cfg.Limiter.Release(at) }
	}
	node, live, err := a.reverify(ctx, n, d)
	if err != nil || node == nil {
		release()
		return actuate.Outcome{}, err
	}
	if a.cfg.DryRun {
		a.ledger.Record(node.Name, string(node.UID), live.Action == ActionCordon)
		a.simSeq[node.Name]++
		id := fmt.Sprintf("cordon/%s/%s/%s/%s/%d", node.UID, VerbDryRun, live.Action, node.ResourceVersion, a.simSeq[node.Name])
		a.publish(VerbDryRun, id, a.payload(VerbDryRun, node.Name, string(node.UID), node.ResourceVersion, live))
		a.count(live.Action, true)
		a.announced.Reset(n.Name)
		return actuate.Outcome{}, nil
	}
	return a.write(ctx, node, live, release)
}

// reverify re-reads the node and recounts its pods from the API, and runs
// Evaluate again on that. It returns a nil node when the action no longer
// applies (node gone, replaced, or no longer qualifying).
func (a *Actuator) reverify(ctx context.Context, n *events.NodeState, want Decision) (*corev1.Node, Decision, error) {
	node, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Node, error) {
		return a.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	})
	if apierrors.IsNotFound(err) {
		a.stale(n.Name, "node no longer exists")
		return nil, Decision{}, nil
	}
	if err != nil {
		return nil, Decision{}, fmt.Errorf("re-read node %s: %w", n.Name, err)
	}
	if string(node.UID) != n.UID {
		a.stale(n.Name, "node was replaced (uid changed)")
		return nil, Decision{}, nil
	}
	pods, err := a.countPods(ctx, n.Name, n.PodsResourceVersion)
	if err != nil {
		return nil, Decision{}, fmt.Errorf("recount pods of node %s: %w", n.Name, err)
	}
	live := stateFromNode(node, pods)
	a.ledger.Correct(node.Name, hasLabel(live, events.LabelAutoCordon))
	live, liveMarked := a.ledger.View(a.cfg.Policy, live)
	got := Evaluate(a.cfg.Policy, live, liveMarked)
	if got.Action != want.Action {
		a.stale(n.Name, fmt.Sprintf("live state says %s (%s)", got.Action, got.Reason))
		return nil, Decision{}, nil
	}
	return node, got, nil
}

// countPods counts the node's non-terminated pods with a field-selector LIST,
// by the same rule as the watcher and the scheduler: every pod bound to the
// node that has not Succeeded or Failed.
//
// notOlderThan is the resourceVersion the watcher counted at: the list is
// then at least as new as the count the decision was made on, and the API
// server answers it from its watch cache (in the benchmark 4 ms instead of
// 16 ms for a consistent read). Without it (an older watcher), the list is a
// consistent read.
func (a *Actuator) countPods(ctx context.Context, nodeName, notOlderThan string) (int, error) {
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(), Limit: 500}
	if notOlderThan != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = notOlderThan, metav1.ResourceVersionMatchNotOlderThan
	}
	count := 0
	for {
		list, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.PodList, error) {
			return a.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		})
		if err != nil {
			return 0, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.NodeName == nodeName && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				count++
			}
		}
		if list.Continue == "" {
			return count, nil
		}
		opts.Continue = list.Continue
	}
}

// write patches the node with a resourceVersion precondition, then records
// the Event and the audit message. release gives the rate-window slot back
// when nothing was written.
func (a *Actuator) write(ctx context.Context, node *corev1.Node, d Decision, release func()) (actuate.Outcome, error) {
	now := a.cfg.Now()
	var (
		patch []byte
		err   error
	)
	if d.Action == ActionCordon {
		patch, _, err = cordonPatch(a.cfg.Policy, node, d, now, a.cfg.Identity)
	} else {
		patch, err = uncordonPatch(a.cfg.Policy, node)
	}
	if err != nil {
		release()
		return actuate.Outcome{}, fmt.Errorf("build patch for node %s: %w", node.Name, err)
	}
	_, err = actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Node, error) {
		return a.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "opswire-cordon"})
	})
	switch {
	case apierrors.IsConflict(err):
		// The resourceVersion precondition failed: look again from fresh state.
		release()
		a.log.Debug().Str("node", node.Name).Msg("node changed between re-read and write; retrying from fresh state")
		return actuate.Outcome{Retry: true}, nil
	case apierrors.IsNotFound(err):
		release()
		a.stale(node.Name, "node deleted before the write")
		return actuate.Outcome{}, nil
	case err != nil:
		release()
		a.fail(node, d, err)
		return actuate.Outcome{}, fmt.Errorf("%s %s: %w", d.Action, node.Name, err)
	}
	a.announced.Reset(node.Name)
	a.ledger.Record(node.Name, string(node.UID), d.Action == ActionCordon)
	verb, reason := VerbCordoned, EventCordoned
	if d.Action == ActionUncordon {
		verb, reason = VerbUncordoned, EventUncordoned
	}
	a.rec.Eventf(node, corev1.EventTypeNormal, reason, "opswire %s (%s): %s", verb, a.cfg.Policy.Mode, d.Reason)
	a.count(d.Action, false)
	a.log.Info().Str("node", node.Name).Str("verb", verb).Int("pods", d.Pods).Int("maxPods", d.MaxPods).
		Int("minPods", d.MinPods).Str("reason", d.Reason).Msg("node " + verb)
	id := "cordon/" + string(node.UID) + "/" + verb + "/" + node.ResourceVersion
	a.publish(verb, id, a.payload(verb, node.Name, string(node.UID), node.ResourceVersion, d))
	return actuate.Outcome{}, nil
}

// refuse announces a cordon refused by the blast-radius cap, once per
// episode: while the refusal persists, later ticks stay silent.
func (a *Actuator) refuse(n *events.NodeState, d Decision, f Fleet) {
	a.m.Refusals.WithLabelValues(d.Code).Inc()
	if !a.announced.First(n.Name, VerbSkipped+"/"+d.Code) {
		return
	}
	a.log.Warn().Str("node", n.Name).Int("pods", d.Pods).Str("reason", d.Reason).Msg("cordon refused")
	a.simSeq[n.Name]++
	p := a.payload(VerbSkipped, n.Name, n.UID, n.ResourceVersion, d)
	p.Held, p.Managed = f.Held, f.Managed
	p.Cap, _, _ = a.cfg.Policy.CordonLimit(f.Managed)
	if !a.cfg.DryRun {
		a.rec.Eventf(nodeRef(n), corev1.EventTypeWarning, EventRefused, "opswire did not %s: %s", d.Action, d.Reason)
	}
	id := fmt.Sprintf("cordon/%s/%s/%s/%d", n.UID, VerbSkipped, n.ResourceVersion, a.simSeq[n.Name])
	a.publish(VerbSkipped, id, p)
}

// fail announces a failed write once per node version; the caller retries.
func (a *Actuator) fail(node *corev1.Node, d Decision, err error) {
	a.m.Failures.WithLabelValues(string(d.Action)).Inc()
	a.log.Error().Err(err).Str("node", node.Name).Str("action", string(d.Action)).Msg("write failed; will retry")
	if !a.announced.First(node.Name, VerbFailed+"/"+string(d.Action)+"/"+node.ResourceVersion) {
		return
	}
	a.rec.Eventf(node, corev1.EventTypeWarning, EventActionFailed, "opswire could not %s: %v", d.Action, err)
	p := a.payload(VerbFailed, node.Name, string(node.UID), node.ResourceVersion, d)
	p.Error = err.Error()
	id := "cordon/" + string(node.UID) + "/" + VerbFailed + "/" + string(d.Action) + "/" + node.ResourceVersion
	a.publish(VerbFailed, id, p)
}

func (a *Actuator) stale(node, why string) {
	a.m.Stale.Inc()
	a.log.Debug().Str("node", node).Str("why", why).Msg("action dropped after re-verification")
}

func (a *Actuator) count(action Action, dryRun bool) {
	dr := strconv.FormatBool(dryRun)
	if action == ActionCordon {
		a.m.Cordons.WithLabelValues(a.cfg.Policy.Mode, dr).Inc()
	} else {
		a.m.Uncordons.WithLabelValues(dr).Inc()
	}
}

func (a *Actuator) payload(verb, node, uid, rv string, d Decision) events.CordonDecision {
	sev := events.SeverityInfo
	switch verb {
	case VerbCordoned, VerbSkipped:
		sev = events.SeverityWarning
	case VerbFailed:
		sev = events.SeverityCritical
	}
	return events.CordonDecision{
		Verb: verb, Action: string(d.Action), Mode: a.cfg.Policy.Mode, Node: node, NodeUID: uid,
		Pods: d.Pods, MaxPods: d.MaxPods, MinPods: d.MinPods, Reason: d.Reason, Code: d.Code,
		Severity: sev, DryRun: a.cfg.DryRun, Time: a.cfg.Now().UTC(), ResourceVersion: rv, Replica: a.cfg.Identity,
	}
}

// publish hands one audit message to the audit publisher, which keeps it
// until OPS stores it (with the same id) without holding up this action or
// the next.
func (a *Actuator) publish(verb, id string, p events.CordonDecision) {
	ev, err := envelope.New(id, envelope.Source(a.cfg.Cluster, Service), events.TypeCordon, p.Node, p, a.cfg.Now())
	if err != nil {
		a.log.Error().Err(err).Str("id", id).Str("node", p.Node).Msg("audit message cannot be encoded")
		return
	}
	a.audit.Publish(subject.Ops(a.cfg.Cluster, Service, verb, p.Node), ev)
}

// nodeRef references a node for an Event without reading it from the API.
func nodeRef(n *events.NodeState) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: types.UID(n.UID)}
}

// Forget drops what the actuator remembers about a deleted node.
func (a *Actuator) Forget(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.announced.Reset(name)
	delete(a.simSeq, name)
}

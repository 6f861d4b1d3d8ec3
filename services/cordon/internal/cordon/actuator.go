package cordon

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/shared/subject"
)

// Verbs of ops.<cluster>.cordon.<verb>.<node> (DESIGN §2).
const (
	VerbCordoned   = "cordoned"
	VerbUncordoned = "uncordoned"
	VerbHandedOver = "handedover"
	VerbSkipped    = "skipped"
	VerbDryRun     = "dryrun"
	VerbFailed     = "failed"
)

// Kubernetes Event reasons recorded on the node.
const (
	EventCordoned     = "OpswireCordoned"
	EventUncordoned   = "OpswireUncordoned"
	EventHandedOver   = "OpswireCordonHandedOver"
	EventRefused      = "OpswireCordonRefused"
	EventActionFailed = "OpswireCordonFailed"
	// EventDoNotCordonHeld: a node opswire holds is labelled donotcordon.
	EventDoNotCordonHeld = "OpswireCordonHeldDoNotCordon"
)

// Service is the actor's name in subjects, ce-source and Event sources.
const Service = "cordon"

// ActionSubjects are the OPS subjects of the writes the rate window counts
// (cordons, uncordons and handovers; never refusals, failures or dry runs).
func ActionSubjects(cluster string) []string {
	return []string{subject.Ops(cluster, Service, VerbCordoned) + ".>", subject.Ops(cluster, Service, VerbUncordoned) + ".>",
		subject.Ops(cluster, Service, VerbHandedOver) + ".>"}
}

// FleetCounter counts, for the blast-radius cap, the nodes that count toward
// it and the nodes opswire manages (Fleets): exclude is the node being
// decided on.
type FleetCounter interface {
	// Mirror counts on the mirror and the ledger: free, possibly stale.
	Mirror(exclude string) Fleet
	// Live counts from the API, at least as new as resourceVersion
	// notOlderThan ("" any).
	Live(ctx context.Context, notOlderThan, exclude string) (Fleet, error)
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
	// ServerRequestTimeout is the API server's --request-timeout
	// (kube.serverRequestTimeout; actuate.DefaultServerRequestTimeout when
	// 0): part of the late-commit horizon of a write whose answer was lost.
	ServerRequestTimeout time.Duration
	Now                  func() time.Time
	// Intents stores a write-ahead intent before each patch (an
	// actuate.Journal); nil: no journal (unit tests).
	Intents actuate.Intents
	// Metadata reads the pods' metadata for the recounts that need only
	// their number (recounter); nil: every recount reads whole pods.
	Metadata metadata.Interface
	// Pause tells whether a pause record holds the actor (a
	// *pause.Watcher); nil: never paused.
	Pause Pauser
}

// Pauser tells whether the actor is paused now, and by which record.
type Pauser interface {
	Paused() (pause.Record, bool)
}

// Actuator is the one place where the cordon actor writes: to the node (the
// patch), to the cluster's Events, and to the OPS audit log. It follows the
// contract of package actuate (docs/actuate.md).
type Actuator struct {
	client  kubernetes.Interface
	recount recounter
	audit   actuate.Audit
	rec     record.EventRecorder
	ledger  *Ledger
	fleet   FleetCounter
	cfg     ActuatorConfig
	m       *Metrics
	log     zerolog.Logger

	// mu serialises actions: the cap check must see every earlier write.
	mu sync.Mutex
	// announced holds, per node, the refusals and failures published in the
	// current episode, so a condition that persists across ticks is announced once.
	announced *actuate.Announced
	// lastWrite is the resourceVersion of opswire's newest write, or of the
	// term's first consistent count if newer: the API count for the cap asks
	// for a list at least that new.
	lastWrite string
	// floored: lastWrite includes this term's consistent count. Until then
	// (a term whose first count failed) every count for the cap is itself a
	// consistent read: a new leader's API server may have a watch cache
	// behind its predecessor's last write.
	floored bool
	// simSeq numbers the decisions that write nothing (dry-run, refusals) per
	// node: the node's resourceVersion does not change for them, so it alone
	// cannot make their message ids unique.
	simSeq map[string]int
	// doubt is the write whose answer was lost and that no read has settled
	// yet (nil: none). No other write goes out while it is there, so there is
	// never more than one.
	doubt *doubt
	// refused holds the uids of the release Events this term's recovery
	// refused (LiveActions), so each is logged and counted once, not on
	// every recovery attempt.
	refused *actuate.Once
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
	if cfg.ServerRequestTimeout <= 0 {
		cfg.ServerRequestTimeout = actuate.DefaultServerRequestTimeout
	}
	return &Actuator{
		client: client, audit: audit, rec: rec, ledger: ledger, fleet: fleet, cfg: cfg, m: m, log: log,
		recount:   recounter{client: client, meta: cfg.Metadata, timeout: cfg.APITimeout},
		announced: actuate.NewAnnounced(), simSeq: map[string]int{}, refused: actuate.NewOnce(maxRefused),
	}
}

// Apply carries out a decision made on the mirror's state of node n, with
// the contract of actuate.Outcome. marked is the mark the decision was made with.
func (a *Actuator) Apply(ctx context.Context, n *events.NodeState, marked bool, d Decision) (actuate.Outcome, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	start := time.Now()
	// Paused: checked before anything that can write (a doubt's settling
	// included), so the decision is published and nothing else happens.
	if d.Action != ActionNone {
		if r, ok := a.paused(); ok {
			a.announcePaused(n, d, r)
			return actuate.Outcome{RequeueAfter: pauseRecheck(r, a.cfg.Now())}, nil
		}
	}
	// A write in doubt is settled first: by the node's own retry (whatever
	// it now decides), and before any other write, so the cap and the rate
	// window never count on a write whose fate is unknown.
	if a.doubt != nil && (a.doubt.node.Name == n.Name || d.Action != ActionNone) {
		w := a.doubt
		v, retryIn, err := a.settle(ctx)
		if w.node.Name != n.Name && (err != nil || v == pending) && !w.heldLogged {
			w.heldLogged = true
			a.log.Warn().AnErr("lost", w.err).Str("node", n.Name).Str("inDoubt", w.node.Name).Str("id", w.o.id).
				Time("sent", w.sent).Dur("horizon", a.horizon()).
				Msg("write held: another node's write is in doubt (its answer was lost); no cordon write goes out until a read decides it, at the latest at its late-commit horizon")
		}
		switch {
		case err != nil:
			return actuate.Outcome{}, err
		case v == pending:
			// Still in doubt: this node (the write's own, or one whose
			// write waits for it) looks again when the next settling read
			// is due, not at once.
			return actuate.Outcome{RequeueAfter: retryIn}, nil
		}
	}
	if d.Action == ActionNone {
		if d.Code == CodeDoNotCordonHeld {
			a.announceHeld(n, d)
			return actuate.Outcome{}, nil
		}
		a.announced.Reset(n.Name)
		return actuate.Outcome{}, nil
	}
	// A first check of the cap on the mirror: free, and it refuses most
	// capped decisions without an API call. The one that binds is below.
	fleet := a.fleet.Mirror(n.Name)
	d, ok := Admit(a.cfg.Policy, d, marked, fleet)
	if !ok {
		a.refuse(n, d, fleet)
		return actuate.Outcome{}, nil
	}
	var slot *actuate.Slot // nil: no window (dry run, unlimited)
	if !a.cfg.DryRun && a.cfg.Limiter != nil {
		var delay time.Duration
		if slot, delay = a.cfg.Limiter.Hold(a.cfg.Now()); delay > 0 {
			a.m.Refusals.WithLabelValues("rate-limited").Inc()
			a.m.RateLimited.Inc()
			a.log.Debug().Str("node", n.Name).Dur("retryIn", delay).Msg("rate limit reached; action deferred")
			return actuate.Outcome{RequeueAfter: delay}, nil
		}
		// Held through the re-reads, the intent and the patch, the slot
		// counts from when this call returns, just after the patch's answer
		// (unless released: nothing was written): the window counts the
		// write when it reached the API, not when it was decided on. A write
		// in doubt keeps it held until a read decides it (settle): a late
		// commit counts from when it is seen, not from the lost answer.
		defer func() {
			if a.doubt == nil || a.doubt.slot != slot {
				slot.Settle(a.cfg.Now())
			}
		}()
	}
	release := slot.Release
	tr := trace{start: start}
	node, live, liveMarked, f, err := a.reverify(ctx, n, marked, d, &tr)
	tr.read = time.Since(start)
	if err != nil || node == nil {
		release()
		return actuate.Outcome{}, err
	}
	// The cap on the live decision, counted from the API: a node unmarked
	// live is a new cordon whatever the mirror said (a mirror "re-apply"
	// included), and a stale mirror cannot hide the marks that hold it.
	if live.Action == ActionCordon && !liveMarked {
		// The count must be at least as new as the node version acted on
		// (and as opswire's newest write). When its LIST was the re-read
		// (f.node is the node acted on) it is the same snapshot; a count
		// taken beside a GET is taken again in the rare case it was served
		// older than the node.
		if f == nil || (f.node != node && !rvAtLeast(f.asOf, node.ResourceVersion)) {
			c, err := a.fleet.Live(ctx, a.countFloor(node.ResourceVersion), node.Name)
			if err != nil {
				release() // fail closed: no cordon without a count
				return actuate.Outcome{}, fmt.Errorf("count the fleet for the cap before cordoning %s: %w", node.Name, err)
			}
			f = &c
		}
		if refused, ok := Admit(a.cfg.Policy, live, false, *f); !ok {
			release()
			a.refuse(stateFromNode(node, live.Pods), refused, *f)
			return actuate.Outcome{}, nil
		}
	}
	if a.cfg.DryRun {
		if live.Action == ActionCordon {
			// The simulated node carries the mark the cordon would have
			// written: its departure baseline decides a paced drain later.
			_, m, err := cordonPatch(a.cfg.Policy, node, live, a.cfg.Now(), a.cfg.Identity)
			ann, jerr := json.Marshal(m)
			if err != nil || jerr != nil {
				ann = nil
			}
			a.ledger.Simulate(node.Name, string(node.UID), string(ann))
		} else {
			a.ledger.Record(node.Name, string(node.UID), false)
		}
		a.simSeq[node.Name]++
		id := fmt.Sprintf("cordon/%s/%s/%s/%s/%d", node.UID, VerbDryRun, live.Action, node.ResourceVersion, a.simSeq[node.Name])
		a.publish(VerbDryRun, id, a.payload(VerbDryRun, node.Name, string(node.UID), node.ResourceVersion, live))
		a.count(live, true)
		a.announced.Reset(n.Name)
		return actuate.Outcome{}, nil
	}
	return a.write(ctx, node, live, slot, tr)
}

// reverify re-reads the node and recounts its pods from the API, and runs
// Evaluate again on that. It returns a nil node when the action no longer
// applies (node gone, replaced, or no longer qualifying), and whether the
// live node carries opswire's mark.
//
// The reads are independent, so they go out at once: the pod recount (watch
// cache, at least as new as the watcher's count) and the node. For an
// uncordon or a handover the node is one GET from the API server's watch
// cache, at least as new as the mirror's version. For a new cordon it is the
// node's item in the cap's fleet count, one LIST of every node from the
// watch cache, at least as new as the mirror's version and opswire's newest
// write: the same freshness as the GET (or more), one request fewer. Either
// way the patch's uid and resourceVersion preconditions come from the object
// read here, so a read that was already stale ends in a 409 and a new look,
// never in a write to another version. The fleet count is returned for the
// caller's cap check when it was taken (nil otherwise). A failed count falls
// back to the GET: it is an error only where the cap needs it (below, the
// caller counts again and fails closed). tr gets the time of each read.
func (a *Actuator) reverify(ctx context.Context, n *events.NodeState, marked bool, want Decision, tr *trace) (*corev1.Node, Decision, bool, *Fleet, error) {
	var (
		wg       sync.WaitGroup
		c        podCount
		countErr error
		fleet    *Fleet
		node     *corev1.Node
		err      error
	)
	start := time.Now()
	// Before a release too: none while an eviction is in flight
	// (CodeEvictionInFlight), whatever the mirror has seen of it.
	evicting := marked && (a.needsEvicting() || want.Action == ActionUncordon)
	wg.Go(func() {
		c, countErr = a.recount.count(ctx, n.Name, n.PodsResourceVersion, evicting)
		tr.recount = time.Since(start)
	})
	if want.Action == ActionCordon && !marked {
		if f, ferr := a.fleet.Live(ctx, a.countFloor(n.ResourceVersion), n.Name); ferr == nil {
			fleet = &f
		}
	}
	switch {
	case fleet != nil && fleet.listed && n.ResourceVersion != "":
		// The LIST named a resourceVersion at least the mirror's (the GET's
		// own): its item is the re-read. Absent: the node is gone.
		if node = fleet.node; node == nil {
			err = apierrors.NewNotFound(corev1.Resource("nodes"), n.Name)
		}
	default:
		// An uncordon or handover; or no count from a LIST (failed, or a
		// counter without the API); or a mirror state without a version,
		// where a GET naming none is a consistent read, as before.
		node, err = actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Node, error) {
			return a.client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{ResourceVersion: n.ResourceVersion})
		})
	}
	tr.node = time.Since(start)
	wg.Wait()
	if apierrors.IsNotFound(err) {
		a.stale(n.Name, "node no longer exists")
		return nil, Decision{}, false, nil, nil
	}
	if err != nil {
		return nil, Decision{}, false, nil, fmt.Errorf("re-read node %s: %w", n.Name, err)
	}
	if string(node.UID) != n.UID {
		a.stale(n.Name, "node was replaced (uid changed)")
		return nil, Decision{}, false, nil, nil
	}
	if countErr != nil {
		return nil, Decision{}, false, nil, fmt.Errorf("recount pods of node %s: %w", n.Name, countErr)
	}
	live := stateFromNode(node, c.Pods)
	live.Evicting = c.Evicting
	// Departed pods are gone from the API: only the watcher's totals know
	// them (and they are compared with the baseline of the live mark).
	live.Departed, live.DepartedEvicted = n.Departed, n.DepartedEvicted
	live.DepartedUnknown, live.EvictionStreak = n.DepartedUnknown, n.EvictionStreak
	apiMarked := hasLabel(live, events.LabelAutoCordon)
	live, liveMarked := a.ledger.View(a.cfg.Policy, live) // dry-run: the simulated mark
	// What the API just said is newer than the mirror: a mark found live is
	// counted from now on, even while the mirror does not show it.
	a.ledger.Learn(node.Name, string(node.UID), node.ResourceVersion, apiMarked, node.Spec.Unschedulable)
	if liveMarked && !evicting && a.needsEvicting() {
		// The mirror showed no mark and the live node has one (another
		// leader's not shown yet, a person's label): its decision may be a
		// handover, which depends on the pods being evicted. Counted again,
		// whole pods.
		again := time.Now()
		c, countErr = a.recount.count(ctx, n.Name, n.PodsResourceVersion, true)
		tr.recount += time.Since(again)
		if countErr != nil {
			return nil, Decision{}, false, nil, fmt.Errorf("recount pods of node %s: %w", n.Name, countErr)
		}
		live.Pods, live.Evicting = c.Pods, c.Evicting
	}
	got, ok := agree(a.cfg.Policy, want, Evaluate(a.cfg.Policy, live, liveMarked), live)
	if !ok {
		a.stale(n.Name, fmt.Sprintf("live state says %s (%s)", got.Action, got.Reason))
		return nil, Decision{}, false, nil, nil
	}
	return node, got, liveMarked, fleet, nil
}

// needsEvicting reports whether a decision on a node opswire holds can
// depend on the pods being evicted (the drain rule, Policy.drained).
func (a *Actuator) needsEvicting() bool { return a.cfg.Policy.DrainEvictingPercent > 0 }

// agree decides whether the live decision confirms the mirror's. Normally
// only the same action does. A drain is the exception, both ways: a live
// handover where the mirror wanted a release (the evictions reached the API
// first), and the mirror's handover where the live state would release the
// node (the evicted pods are already gone: the mirror saw the drain, and the
// handover is the safer of the two, it only removes the mark).
func agree(p Policy, want, got Decision, live *events.NodeState) (Decision, bool) {
	switch {
	case got.Action == want.Action:
		return got, true
	case want.Action == ActionUncordon && got.Action == ActionHandOver:
		return got, true
	case want.Action == ActionHandOver && got.Action == ActionUncordon && live.Unschedulable && p.cordonedByMark(live):
		want.Pods = got.Pods
		return want, true
	}
	return got, false
}

// trace times the steps of one action, for the log line of the write: the
// re-reads (node, pod recount and cap count at once: read is the longer of
// recount and node), the intent's publish, and the patch.
type trace struct {
	start                              time.Time
	read, recount, node, intent, patch time.Duration
}

// write patches the node with a resourceVersion precondition, then records
// the Event and the audit message. slot (nil: no window) is given back when
// nothing was written, and handed to the doubt when the answer is lost.
func (a *Actuator) write(ctx context.Context, node *corev1.Node, d Decision, slot *actuate.Slot, tr trace) (actuate.Outcome, error) {
	release := slot.Release
	now := a.cfg.Now()
	patch, err := a.patchFor(node, d, now)
	if err != nil {
		release()
		return actuate.Outcome{}, fmt.Errorf("build patch for node %s: %w", node.Name, err)
	}
	o := a.outcomeOf(node, d, now)
	intent, journaled := a.journal(ctx, node, o, &tr)
	t, sent := time.Now(), a.cfg.Now()
	patched, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Node, error) {
		return a.client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "opswire-cordon"})
	})
	tr.patch = time.Since(t)
	switch actuate.Classify(err) {
	case actuate.AnswerConflict:
		// The resourceVersion precondition failed: look again from fresh state.
		release()
		a.log.Debug().Str("node", node.Name).Msg("node changed between re-read and write; retrying from fresh state")
		return actuate.Outcome{Retry: true}, nil
	case actuate.AnswerGone:
		release()
		a.stale(node.Name, "node deleted before the write")
		return actuate.Outcome{}, nil
	case actuate.AnswerThrottled:
		// Throttled before it was processed (priority and fairness, a server
		// shutting down): nothing was written, and nothing failed. Not a
		// write in doubt, which would hold every cordon write until its
		// late-commit horizon.
		release()
		a.answerIntent(ctx, intent, journaled, "throttled")
		a.log.Debug().Err(err).Str("node", node.Name).Msg("write throttled by the API server; retrying with backoff")
		return actuate.Outcome{Retry: true}, nil
	case actuate.AnswerUnknown:
		// The answer is lost, not the write: whether the API applied it is
		// for a read of the node to tell (settle), not for this error.
		// Its slot stays held with it and is settled (never given back)
		// when a read decides it (settle).
		a.doubt = &doubt{node: node, d: d, o: o, err: err, tr: tr, sent: sent, intent: intent, unjournaled: !journaled, slot: slot}
		a.m.WritesInDoubt.WithLabelValues(actuate.DoubtUnanswered).Inc()
		switch v, retryIn, serr := a.settle(ctx); {
		case serr != nil:
			return actuate.Outcome{}, serr // still in doubt: the retry settles it first
		case v == pending:
			return actuate.Outcome{RequeueAfter: retryIn}, nil // the next settling read
		case v == notApplied:
			return actuate.Outcome{}, fmt.Errorf("%s %s: %w", d.Action, node.Name, err)
		case v == unclear:
			return actuate.Outcome{Retry: true}, nil
		}
		return actuate.Outcome{}, nil
	case actuate.AnswerRefused:
		release()
		a.answerIntent(ctx, intent, journaled, "refused")
		a.fail(node, d, err)
		return actuate.Outcome{}, fmt.Errorf("%s %s: %w", d.Action, node.Name, err)
	}
	a.done(node, d, o, patched.ResourceVersion, tr)
	return actuate.Outcome{}, nil
}

// patchFor builds the patch of decision d on node, as of now (the mark's time).
func (a *Actuator) patchFor(node *corev1.Node, d Decision, now time.Time) ([]byte, error) {
	switch d.Action {
	case ActionCordon:
		patch, _, err := cordonPatch(a.cfg.Policy, node, d, now, a.cfg.Identity)
		return patch, err
	case ActionHandOver:
		return handoverPatch(a.cfg.Policy, node, now)
	default:
		return uncordonPatch(a.cfg.Policy, node, now)
	}
}

// written is the outcome of a write, built before the patch: the verb, the
// Event's reason, and the audit message (subject, envelope, id) the intent
// carries and the success publishes, byte for byte.
type written struct {
	verb, reason, id, subj string
	p                      events.CordonDecision
	ev                     envelope.Event
	encErr                 error
}

// outcomeOf builds the outcome of decision d on node as of now. The
// payload's time is the mark's, and its resourceVersion the one the patch is
// preconditioned on: Happened and settle tell this write's mark by them.
func (a *Actuator) outcomeOf(node *corev1.Node, d Decision, now time.Time) written {
	o := written{verb: VerbCordoned, reason: EventCordoned}
	switch d.Action {
	case ActionUncordon:
		o.verb, o.reason = VerbUncordoned, EventUncordoned
	case ActionHandOver:
		o.verb, o.reason = VerbHandedOver, EventHandedOver
	}
	o.id = "cordon/" + string(node.UID) + "/" + o.verb + "/" + node.ResourceVersion
	o.p = a.payload(o.verb, node.Name, string(node.UID), node.ResourceVersion, d)
	o.p.Time = now.UTC()
	o.subj, o.ev, o.encErr = a.event(o.verb, o.id, o.p)
	return o
}

// journal stores the write-ahead intent carrying o: a leader killed after
// the patch but before the Auditor stored the outcome leaves the intent, and
// the next leader publishes this very message (same id) once the live node
// shows the patch (Happened). It returns the intent (nil: none, no journal or
// not encodable) and whether it was stored; a write whose answer is lost
// stores an unstored one again while it is in doubt (settle).
func (a *Actuator) journal(ctx context.Context, node *corev1.Node, o written, tr *trace) (*intentMsg, bool) {
	if o.encErr != nil || a.cfg.Intents == nil {
		return nil, false
	}
	isubj, iev, err := actuate.NewIntent(a.cfg.Cluster, events.Intent{Actor: Service, Action: o.verb, Kind: "Node",
		Name: node.Name, UID: string(node.UID)}, o.subj, o.ev)
	if err != nil {
		a.log.Error().Err(err).Str("node", node.Name).Msg("intent cannot be encoded: writing unjournaled")
		return nil, false
	}
	t := time.Now()
	stored := a.cfg.Intents.Record(ctx, isubj, iev)
	tr.intent = time.Since(t)
	return &intentMsg{subj: isubj, ev: iev}, stored
}

// answerIntent stores the answer record of a stored intent whose patch was
// answered and not applied (refused, throttled), or was in doubt and can no
// longer commit (settle: not applied past the horizon): the next leader need
// not wait out the late-commit horizon for it on an unchanged node
// (actuate.NewAnswer), nor for a later attempt of the same outcome id
// (actuate.LatestAttempts). A conflict needs none: the node's
// resourceVersion moved, which Happened takes as final already, and a retry
// is on the new version (another outcome id).
func (a *Actuator) answerIntent(ctx context.Context, intent *intentMsg, journaled bool, why string) {
	if ans, ok := a.cfg.Intents.(actuate.Answers); ok && intent != nil && journaled {
		ans.Answer(ctx, intent.subj, intent.ev, why)
	}
}

// done finishes a write the API applied: the ledger and lastWrite learn the
// version it produced (rv, or a later one a read showed), then the Event on
// the node as acted on (its resourceVersion is the one the write was decided
// on, which LiveActions reads back), the metrics and the outcome message.
func (a *Actuator) done(node *corev1.Node, d Decision, o written, rv string, tr trace) {
	a.announced.Reset(node.Name)
	if d.Action == ActionCordon {
		a.ledger.RecordAt(node.Name, string(node.UID), rv, true)
	} else {
		a.ledger.RecordRelease(node.Name, string(node.UID), rv, d.Action == ActionHandOver)
	}
	a.lastWrite = newestRV(a.lastWrite, rv)
	a.rec.Eventf(node, corev1.EventTypeNormal, o.reason, "opswire %s (%s): %s", o.verb, a.effectOf(d), d.Reason)
	a.count(d, false)
	a.log.Info().Str("node", node.Name).Str("verb", o.verb).Int("pods", d.Pods).Int("maxPods", d.MaxPods).
		Int("minPods", d.MinPods).Str("reason", d.Reason).Dur("readMs", tr.read).Dur("recountMs", tr.recount).Dur("nodeReadMs", tr.node).Dur("intentMs", tr.intent).
		Dur("patchMs", tr.patch).Dur("tookMs", time.Since(tr.start)).Msg("node " + o.verb)
	if o.encErr != nil {
		a.log.Error().Err(o.encErr).Str("id", o.id).Str("node", node.Name).Msg("audit message cannot be encoded")
		return
	}
	a.audit.Publish(o.subj, o.ev)
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
	a.publish(VerbSkipped, a.refusalID(n, a.simSeq[n.Name]), p)
}

// announcePaused publishes, once per node and pause, the decision a pause
// holds back, as skipped with code paused. No Kubernetes Event: that is a
// write too, and a pause means none.
func (a *Actuator) announcePaused(n *events.NodeState, d Decision, r pause.Record) {
	a.m.Refusals.WithLabelValues(pause.Reason).Inc()
	if !a.announced.First(n.Name, VerbSkipped+"/"+pause.Reason+"/"+r.Since.String()) {
		return
	}
	a.log.Info().Str("node", n.Name).Str("action", string(d.Action)).Str("pause", r.String()).Msg("decision held back: paused")
	a.simSeq[n.Name]++
	d.Code, d.Reason = pause.Reason, d.Reason+" (not applied: "+r.String()+")"
	a.publish(VerbSkipped, a.refusalID(n, a.simSeq[n.Name]), a.payload(VerbSkipped, n.Name, n.UID, n.ResourceVersion, d))
}

// paused returns the pause that holds the actor now, if any.
func (a *Actuator) paused() (pause.Record, bool) {
	if a.cfg.Pause == nil {
		return pause.Record{}, false
	}
	return a.cfg.Pause.Paused()
}

// pauseRecheck is when a held-back decision is looked at again: at the
// pause's end, and at least every second so that a resume takes effect
// without waiting for the next tick.
func pauseRecheck(r pause.Record, now time.Time) time.Duration {
	if r.Until.IsZero() {
		return time.Second
	}
	return max(min(r.Until.Sub(now), time.Second), 10*time.Millisecond)
}

// announceHeld says, once per episode, that a node opswire holds carries
// the donotcordon label: opswire leaves it cordoned and marked (it neither
// releases nor re-applies it), and only a person can end that. Published as
// skipped (code donotcordon-held, nothing wanted: no action) with a Warning
// Event, like a refusal; nothing is written to the node.
func (a *Actuator) announceHeld(n *events.NodeState, d Decision) {
	if !a.announced.First(n.Name, VerbSkipped+"/"+d.Code) {
		return
	}
	a.log.Warn().Str("node", n.Name).Str("reason", d.Reason).Msg("node opswire holds is labelled donotcordon: left cordoned and marked")
	a.simSeq[n.Name]++
	p := a.payload(VerbSkipped, n.Name, n.UID, n.ResourceVersion, d)
	p.Action = ""
	// An Event is a write: none while paused (the OPS message says it all).
	if _, paused := a.paused(); !a.cfg.DryRun && !paused {
		a.rec.Eventf(nodeRef(n), corev1.EventTypeWarning, EventDoNotCordonHeld, "opswire leaves the node as it is: %s", d.Reason)
	}
	a.publish(VerbSkipped, a.refusalID(n, a.simSeq[n.Name]), p)
}

// refusalID is the id of the seq-th refusal episode on node n. A dry-run
// replica runs beside the real one (its own Lease) and refuses the same node
// at the same version with the same seq: its id carries "dryrun", so OPS
// does not drop one of the two as the other's duplicate.
func (a *Actuator) refusalID(n *events.NodeState, seq int) string {
	kind := VerbSkipped
	if a.cfg.DryRun {
		kind += "/" + VerbDryRun
	}
	return fmt.Sprintf("cordon/%s/%s/%s/%d", n.UID, kind, n.ResourceVersion, seq)
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

func (a *Actuator) count(d Decision, dryRun bool) {
	dr := strconv.FormatBool(dryRun)
	switch d.Action {
	case ActionCordon:
		a.m.Cordons.WithLabelValues(a.effectOf(d), dr).Inc()
	case ActionHandOver:
		a.m.Handovers.WithLabelValues(dr).Inc()
	default:
		a.m.Uncordons.WithLabelValues(dr).Inc()
	}
}

func (a *Actuator) payload(verb, node, uid, rv string, d Decision) events.CordonDecision {
	sev := events.SeverityInfo
	switch verb {
	case VerbCordoned, VerbHandedOver, VerbSkipped:
		sev = events.SeverityWarning
	case VerbFailed:
		sev = events.SeverityCritical
	}
	return events.CordonDecision{
		Verb: verb, Action: string(d.Action), Mode: a.effectOf(d), Node: node, NodeUID: uid,
		Pods: d.Pods, MaxPods: d.MaxPods, MinPods: d.MinPods, Reason: d.Reason, Code: d.Code,
		Severity: sev, DryRun: a.cfg.DryRun, Time: a.cfg.Now().UTC(), ResourceVersion: rv, Replica: a.cfg.Identity,
	}
}

// effectOf is the effect decision d applies or lifts: the one its node's
// mark lists (Decision.Effect), or the current mode for a new cordon.
func (a *Actuator) effectOf(d Decision) string {
	if d.Effect != "" {
		return d.Effect
	}
	return a.cfg.Policy.Mode
}

// publish hands one audit message to the audit publisher, which keeps it
// until OPS stores it (with the same id) without holding up this action or
// the next.
func (a *Actuator) publish(verb, id string, p events.CordonDecision) {
	subj, ev, err := a.event(verb, id, p)
	if err != nil {
		a.log.Error().Err(err).Str("id", id).Str("node", p.Node).Msg("audit message cannot be encoded")
		return
	}
	a.audit.Publish(subj, ev)
}

// event builds the OPS message of a decision: its subject and envelope.
func (a *Actuator) event(verb, id string, p events.CordonDecision) (string, envelope.Event, error) {
	ev, err := envelope.New(id, envelope.Source(a.cfg.Cluster, Service), events.TypeCordon, p.Node, p, a.cfg.Now())
	return subject.Ops(a.cfg.Cluster, Service, verb, p.Node), ev, err
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
	if a.doubt != nil && a.doubt.node.Name == name {
		a.log.Warn().Str("node", name).Str("id", a.doubt.o.id).Msg("node deleted while a write to it was in doubt; no outcome published")
		a.doubt.slot.Settle(a.cfg.Now()) // it may have been written: counted
		a.m.WritesInDoubt.WithLabelValues(actuate.DoubtGone).Inc()
		a.doubt = nil
	}
}

// StartTerm is told the term's first count, a consistent read: its version
// is the floor of every later count, so no count of this term can come from
// a watch cache older than what the term started from (its predecessor's
// last write included).
func (a *Actuator) StartTerm(f Fleet) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f.listed {
		a.lastWrite, a.floored = newestRV(a.lastWrite, f.asOf), true
	}
}

// countFloor is the version a count for the cap must be at least as new as
// ("" asks for a consistent read; a.mu held).
func (a *Actuator) countFloor(nodeRV string) string {
	if !a.floored {
		return ""
	}
	return newestRV(a.lastWrite, nodeRV)
}

// EndTerm is called once the term's last Apply has returned: a write still
// in doubt is left to its intent (the next leader's recovery decides it,
// Happened) and counted as term_ended, so that unanswered minus the decided
// ones stays the write in doubt now. The metrics outlive the term (a replica
// that is leader again later, or a standby, reported one in doubt for good).
func (a *Actuator) EndTerm() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.floored = false // the next term starts from a consistent count of its own
	if a.doubt == nil {
		return
	}
	a.log.Warn().AnErr("lost", a.doubt.err).Str("node", a.doubt.node.Name).Str("id", a.doubt.o.id).
		Msg("term over with a write in doubt: the next leader's recovery decides it from its intent")
	a.doubt.slot.Settle(a.cfg.Now()) // it may have been written: counted
	a.m.WritesInDoubt.WithLabelValues(actuate.DoubtTermEnded).Inc()
	a.doubt = nil
}

// newestRV returns the newer of two resourceVersions (etcd revisions; ""
// or unparsable count as older).
func newestRV(a, b string) string {
	if rvAtLeast(a, b) || b == "" {
		return a
	}
	if rvAtLeast(b, a) || a == "" {
		return b
	}
	return a
}

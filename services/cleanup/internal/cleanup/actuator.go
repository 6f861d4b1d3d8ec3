package cleanup

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kube"
	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/shared/subject"
)

// Verbs of OPS subjects ops.<cluster>.cleanup.<verb>.<ns>.<pod>.
const (
	VerbDeleted      = "deleted"
	VerbForceDeleted = "forcedeleted"
	// VerbDeletionRequested: the delete was accepted but finalizers keep the
	// pod (Terminating) until their controllers remove them.
	VerbDeletionRequested = "deletionrequested"
	VerbSkipped           = "skipped"
	VerbDryRun            = "dryrun"
	VerbFailed            = "failed"
)

// Service is the service name in ce-source and subjects.
const Service = "cleanup"

// Outcome tells the controller what to do with the pod's key next: the one
// contract of every actuator (actuate.Outcome).
type Outcome = actuate.Outcome

// ActionSubjects are the OPS subjects of the removals the rate window counts
// (never skips, failures or dry runs).
func ActionSubjects(cluster string) []string {
	var out []string
	for _, verb := range []string{VerbDeleted, VerbForceDeleted, VerbDeletionRequested} {
		out = append(out, subject.Ops(cluster, Service, verb)+".>")
	}
	return out
}

// ActuatorConfig are the actuator's settings.
type ActuatorConfig struct {
	Cluster string
	Policy  Policy
	DryRun  bool
	// Limiter caps deletions (maxDeletionsPerMinute per rateWindow), seeded
	// from OPS at leadership start.
	Limiter *actuate.Window
	// APITimeout bounds each API call (actuate.DefaultAPITimeout when 0).
	APITimeout time.Duration
	// ServerRequestTimeout is the API server's --request-timeout
	// (kube.serverRequestTimeout; actuate.DefaultServerRequestTimeout when
	// 0): part of the late-commit horizon of a write whose answer was lost.
	ServerRequestTimeout time.Duration
	// Now is the clock of decisions and audit times: the API server's
	// (ServerClock.Now; time.Now when nil).
	Now func() time.Time
	// Intents stores a write-ahead intent before each write (an
	// actuate.Journal); nil: no journal (unit tests). An intent it cannot
	// store is journaled as a CleanupIntent Event instead (journal.go).
	Intents actuate.Intents
	// Replica is this replica's identity, the source host of the Events it
	// writes itself.
	Replica string
	// Pause tells whether a pause record holds the actor (a
	// *pause.Watcher); nil: never paused.
	Pause Pauser
	// WindowNow is the clock of the rate window (time.Now when nil). It must
	// be monotonic: the API server's clock is a lower bound that steps by up
	// to a second as samples come in, which would open window slots early.
	WindowNow func() time.Time
}

// Pauser tells whether the actor is paused now, and by which record.
type Pauser interface {
	Paused() (pause.Record, bool)
}

// Actuator is the one place through which the cleanup actor writes to the
// cluster. For each deletion it applies, in order: the dry-run switch, the
// deletion cap, a live GET (gone → nothing to do; other UID → recreated, never
// touched), the same decision on the live pod, the delete with UID and
// resourceVersion preconditions (grace 0 for force), then a Kubernetes Event,
// the OPS audit event with an idempotent id, and metrics. It follows the
// contract of package actuate (docs/actuate.md).
type Actuator struct {
	client   kubernetes.Interface
	audit    actuate.Audit
	recorder record.EventRecorder
	metrics  *Metrics
	log      zerolog.Logger
	cfg      ActuatorConfig

	// reported holds, per pod UID, the verb/reason decisions already published,
	// so a skip is published once per pod and reason rather than every tick.
	reported *actuate.Announced

	// removed holds the UIDs of pods this leader saw leave the API server
	// (its own removal, or a re-read that found the pod gone), so that the
	// mirror's late messages about them (above all the API server's deletion
	// update of the pod this very actuator just removed) are dropped without
	// a re-read that could only answer 404.
	removed *removedUIDs

	// doubts holds the removal writes on their way or whose answer was lost
	// (doubt.go): settled when the pod is read again or the mirror sees it
	// leave, never taken for a refusal.
	doubts *doubts

	// refused holds the UIDs of the removal Events the recovery refused
	// (LiveActions), so each is logged and counted once, not on every
	// recovery attempt.
	refused *actuate.Once

	// started is when this actuator (one per term) was built, on this
	// replica's clock: a CleanupIntent Event created before it (its
	// creationTimestamp, the API server's clock: a skew between the two only
	// moves the bound by as much) can be an earlier leader's removal whose
	// write may still commit (LiveActions).
	started time.Time
}

// maxRefused bounds Actuator.refused (actuate.Once).
const maxRefused = 4096

// NewActuator builds the actuator. recorder receives the Kubernetes Events;
// audit queues the OPS messages (an actuate.Auditor).
func NewActuator(client kubernetes.Interface, audit actuate.Audit, recorder record.EventRecorder, m *Metrics, log zerolog.Logger, cfg ActuatorConfig) *Actuator {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WindowNow == nil {
		cfg.WindowNow = time.Now
	}
	if cfg.APITimeout <= 0 {
		cfg.APITimeout = actuate.DefaultAPITimeout
	}
	if cfg.ServerRequestTimeout <= 0 {
		cfg.ServerRequestTimeout = actuate.DefaultServerRequestTimeout
	}
	return &Actuator{client: client, audit: audit, recorder: recorder, metrics: m, log: log, cfg: cfg,
		reported: actuate.NewAnnounced(), removed: newRemovedUIDs(removedTTL), doubts: newDoubts(), started: cfg.Now(),
		refused: actuate.NewOnce(maxRefused)}
}

// Forget drops what was remembered about a pod that left the cluster. A
// removal of it in doubt happened: it is published. The UID stays among the
// removed (removedUIDs, until it expires): a key queued before the mirror
// removed the pod can still be visited after, by a worker that found the pod
// in the mirror just before, and its re-read could only find the pod gone.
func (a *Actuator) Forget(uid string) {
	if rm := a.doubts.left(uid); rm != nil {
		a.metrics.InDoubt.WithLabelValues(actuate.DoubtApplied).Inc()
		a.complete(rm, rm.lost.op+"; "+rm.lost.lostWhat()+", and the mirror saw the pod leave")
	}
	a.doubts.forget(uid)
	a.reported.Reset(uid)
}

// Handle carries out a Skip, Delete or ForceDelete decision on a mirrored
// pod, made on the facts f; the live re-check decides again on the live pod
// and node, with f's node count. A pod this leader already saw leave the API
// server (removedUIDs) is not looked at again: the mirror is behind, and a
// re-read could only answer 404.
func (a *Actuator) Handle(ctx context.Context, pod *events.PodState, d Decision, f Facts) (Outcome, error) {
	if a.removed.has(pod.UID, a.cfg.WindowNow()) {
		a.metrics.Rechecks.WithLabelValues("known_gone").Inc()
		a.log.Debug().Str("pod", pod.Namespace+"/"+pod.Name).Str("uid", pod.UID).Stringer("action", d.Action).
			Msg("pod already gone from the API server; the mirror is behind")
		return Outcome{}, nil
	}
	// Paused: checked before anything that can write (a doubt's settling
	// included); the decision is published, nothing else happens.
	if d.Action == Delete || d.Action == ForceDelete {
		if r, ok := a.pausedBy(); ok {
			a.announcePaused(pod, d, r)
			return Outcome{RequeueAfter: pauseRecheck(r, a.cfg.WindowNow())}, nil
		}
	}
	if settled, out, err := a.resolve(ctx, pod.UID); settled {
		return out, err
	}
	switch d.Action {
	case Skip:
		a.reportOnce(pod, d, VerbSkipped, "")
		return Outcome{}, nil
	case Delete, ForceDelete:
		return a.delete(ctx, pod, d, f)
	}
	return Outcome{}, nil
}

func (a *Actuator) delete(ctx context.Context, pod *events.PodState, d Decision, f Facts) (Outcome, error) {
	if a.cfg.DryRun && a.reported.Has(pod.UID, VerbDryRun+"/"+d.Reason) {
		return Outcome{}, nil
	}
	var slot *actuate.Slot // nil in dry run: no window
	if !a.cfg.DryRun {
		var wait time.Duration
		if slot, wait = a.cfg.Limiter.Hold(a.cfg.WindowNow()); wait > 0 {
			a.metrics.Deferred.Inc()
			return Outcome{RequeueAfter: wait}, nil
		}
		// The slot is held through the re-reads, the intent and the writes,
		// and counts from the last write's answer once this visit is over
		// (unless released: nothing was written), so the window counts the
		// writes when they reach the API, not when they were decided on.
		defer func() { slot.Settle(a.cfg.WindowNow()) }()
	}
	release := slot.Release
	live, node, err := a.reread(ctx, pod, a.cfg.Policy.Braking(f.countNow()))
	if err != nil {
		release()
		return Outcome{Retry: true}, err
	}
	if live == nil {
		release()
		return Outcome{}, nil
	}
	state := liveState(live, pod.Owner)
	// The clock and the node count are read again: after the GETs it is the
	// API server's time, and nodes may have gone Unknown meanwhile (the
	// brake is judged at the write).
	ld := a.cfg.Policy.Decide(state, Facts{Node: node, Now: a.cfg.Now(), Nodes: f.countNow()})
	if ld.Action != d.Action {
		release()
		a.metrics.Rechecks.WithLabelValues("changed").Inc()
		a.log.Info().Str("pod", pod.Namespace+"/"+pod.Name).Stringer("mirror", d.Action).Stringer("live", ld.Action).
			Msg("live pod no longer matches the mirrored decision")
		switch ld.Action {
		case Wait:
			return Outcome{RequeueAfter: ld.Until.Sub(a.cfg.Now())}, nil
		case Skip:
			a.reportOnce(state, ld, VerbSkipped, "")
			return Outcome{}, nil
		case Delete, ForceDelete:
			return Outcome{Retry: true}, nil // the mirror is behind; look again shortly
		}
		return Outcome{}, nil
	}
	if a.cfg.DryRun {
		a.reportOnce(state, ld, VerbDryRun, "")
		return Outcome{}, nil
	}
	return a.write(ctx, live, state, ld, slot, release)
}

// reread GETs the pod and, for a Terminating pod, its node when the decision
// depends on it: for the partition rule (a pod tied to its node or storage,
// holdsNode), and for every pod while braking (a node not Ready and tainted
// out-of-service releases its pods from the brake). It returns a nil pod
// when the pod is gone or was recreated under the same name, and a nil node
// when the node does not exist or is not needed.
func (a *Actuator) reread(ctx context.Context, pod *events.PodState, braking bool) (*corev1.Pod, *events.NodeState, error) {
	live, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Pod, error) {
		return a.client.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	})
	if apierrors.IsNotFound(err) {
		a.metrics.Rechecks.WithLabelValues("gone").Inc()
		a.removed.add(pod.UID, a.cfg.WindowNow())
		return nil, nil, nil
	}
	if err != nil {
		a.metrics.APIErrors.WithLabelValues("get_pod").Inc()
		return nil, nil, fmt.Errorf("re-read pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if string(live.UID) != pod.UID {
		a.metrics.Rechecks.WithLabelValues("recreated").Inc()
		a.removed.add(pod.UID, a.cfg.WindowNow())
		a.log.Info().Str("pod", pod.Namespace+"/"+pod.Name).Str("uid", pod.UID).Str("liveUID", string(live.UID)).
			Msg("pod was recreated under the same name; not touching it")
		return nil, nil, nil
	}
	// The node is read for every pod the partition rule may hold: without
	// it the live decision would take the node for deleted and release the
	// pod (a DaemonSet pod too, not only a StatefulSet's). While braking it
	// is read for every pod: without it no pod would leave the brake.
	kind := ""
	if ref := metav1.GetControllerOf(live); ref != nil {
		kind = ref.Kind
	}
	if live.DeletionTimestamp == nil || live.Spec.NodeName == "" || !(braking || holdsNode(kind, kube.PodHoldsStorage(live))) {
		return live, nil, nil
	}
	n, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Node, error) {
		return a.client.CoreV1().Nodes().Get(ctx, live.Spec.NodeName, metav1.GetOptions{})
	})
	if apierrors.IsNotFound(err) {
		return live, nil, nil
	}
	if err != nil {
		a.metrics.APIErrors.WithLabelValues("get_node").Inc()
		return nil, nil, fmt.Errorf("re-read node %s: %w", live.Spec.NodeName, err)
	}
	return live, liveNode(n), nil
}

// removal is one removal of a pod: the pod as verified, the live decision
// and its verb, and the outcome message, built before the first write and
// journaled with its intent, published once the removal is known to have
// happened (by the write's answer, or by settling a write in doubt).
type removal struct {
	state  *events.PodState
	d      Decision
	verb   string
	subj   string
	ev     envelope.Event
	encErr error
	ann    map[string]string // the journal, on the outcome Event
	// isubj and iev are its intent as stored in OPS (iev.ID "": not stored
	// there), for its answer record (answerIntent).
	isubj   string
	iev     envelope.Event
	slot    *actuate.Slot // the removal's place in the rate window (nil in dry run)
	release func()        // gives the deletion slot back
	lost    *errInDoubt   // the write whose answer was lost
}

// newRemoval builds the removal of the live pod decided d, with its verb and
// outcome message, in slot. release gives the slot back (once).
func (a *Actuator) newRemoval(state *events.PodState, d Decision, slot *actuate.Slot, release func()) *removal {
	rm := &removal{state: state, d: d, verb: VerbDeleted, slot: slot}
	switch {
	case d.Action == ForceDelete:
		rm.verb = VerbForceDeleted
	case d.Remains:
		rm.verb = VerbDeletionRequested
	}
	var once sync.Once
	rm.release = func() { once.Do(release) }
	rm.subj, rm.ev, rm.encErr = a.decisionEvent(state, d, rm.verb, "")
	return rm
}

// write performs the deletion the live pod qualifies for, in the rate
// window's slot (each write's answer is reported to it: answered).
func (a *Actuator) write(ctx context.Context, live *corev1.Pod, state *events.PodState, d Decision, slot *actuate.Slot, release func()) (Outcome, error) {
	rm := a.newRemoval(state, d, slot, release)
	// On its way from before the journal: the mirror seeing the pod leave
	// meanwhile (an earlier write landing) must not forget that an earlier
	// write may land (doubts.forget), or this write's 404 would be taken
	// for someone else's removal.
	tracked := a.doubts.send(rm)
	if err := a.journal(ctx, live, rm); err != nil {
		a.doubts.answered(state.UID)
		rm.release()
		a.metrics.APIErrors.WithLabelValues("journal_event").Inc()
		return Outcome{Retry: true}, err
	}
	return a.send(ctx, live, rm, tracked)
}

// send makes the writes of rm to the live pod (remove) as a write on its way
// (doubts.send, tracked): an answer drops it, a lost answer keeps it in
// doubt (unanswered).
func (a *Actuator) send(ctx context.Context, live *corev1.Pod, rm *removal, tracked bool) (Outcome, error) {
	out, err := a.remove(ctx, live, rm)
	var lost *errInDoubt
	if !errors.As(err, &lost) {
		a.doubts.answered(rm.state.UID)
		return out, err
	}
	return a.unanswered(rm, lost, tracked)
}

// journal stores the removal's intent before the write. The outcome audit
// is built before the write and journaled with the intent: a leader killed
// after the write but before the Auditor stored the outcome leaves the
// intent, and the next leader publishes this very message (same id) once it
// sees the pod gone (actuate.SeedAndRecover with Happened). When OPS cannot
// store the intent in time (NATS down), the intent is written synchronously
// as a CleanupIntent Event through the API, which does not depend on NATS;
// when that fails too (the error), the removal is held back: no removal
// without a journal a new leader reads. The outcome Event carries the
// intent too (annotations), so a new leader rebuilds the exact outcome
// message from either Event.
func (a *Actuator) journal(ctx context.Context, live *corev1.Pod, rm *removal) error {
	if rm.encErr != nil {
		return nil
	}
	in := events.Intent{Actor: Service, Action: rm.verb, Kind: "Pod", Namespace: live.Namespace, Name: live.Name, UID: string(live.UID)}
	isubj, iev, err := actuate.NewIntent(a.cfg.Cluster, in, rm.subj, rm.ev)
	if err != nil {
		a.log.Error().Err(err).Str("pod", live.Namespace+"/"+live.Name).Msg("intent cannot be encoded: writing unjournaled")
		return nil
	}
	rm.ann = journalAnnotations(iev, a.cfg.WindowNow()) // each write's answer moves it (answered)
	if a.cfg.Intents == nil {
		return nil
	}
	if a.cfg.Intents.Record(ctx, isubj, iev) {
		rm.isubj, rm.iev = isubj, iev
		return nil
	}
	if err := a.journalEvent(ctx, live, rm.verb, rm.ann); err != nil {
		return fmt.Errorf("journal the removal of pod %s/%s as an Event (OPS did not store its intent): %w", live.Namespace, live.Name, err)
	}
	a.metrics.JournalEvents.Inc()
	return nil
}

// remove makes the writes of a removal: the finalizer patch (when the
// decision clears them), then the DELETE. A write whose answer was lost
// returns an *errInDoubt.
func (a *Actuator) remove(ctx context.Context, live *corev1.Pod, rm *removal) (Outcome, error) {
	rv := live.ResourceVersion
	clearedFinalizers := false
	if rm.d.RemoveFinalizers {
		sent := a.cfg.WindowNow()
		patched, err := a.clearFinalizers(ctx, live)
		a.answered(rm.slot, rm.ann)
		if stop, out, err := a.answer(ctx, rm, sentWrite(opRemoveFinalizers, live, rv, sent), err); stop {
			return out, err
		}
		if len(patched.Finalizers) > 0 {
			return a.finalizersPutBack(ctx, rm, patched.Finalizers, sent)
		}
		// The patch went through: the deletion it unblocked may complete
		// without the DELETE (a kubelet ending a graceful one), so whatever
		// the DELETE's answer, the pod's going is this removal: a retry's
		// 404 counts as it (mayLand), and no answer record is stored
		// meanwhile (certain).
		a.doubts.lateUntil(rm.state.UID, sent.Add(a.horizon()), a.cfg.WindowNow())
		if deletedByUpdate(live) {
			// The pod was already being deleted with grace 0 (or none): the
			// API server removed it during this update, as soon as its last
			// finalizer went. That removal is this actor's: audited, counted
			// against the cap, and no DELETE follows (it would find nothing).
			a.complete(rm, "finalizers cleared; the API server removed the pod")
			return Outcome{}, nil
		}
		rv, clearedFinalizers = patched.ResourceVersion, true
	}
	sent := a.cfg.WindowNow()
	err := a.deletePod(ctx, live, rm.d, rv)
	a.answered(rm.slot, rm.ann)
	if clearedFinalizers && apierrors.IsNotFound(err) {
		// Gone between our patch and the DELETE: the patch let a pending
		// deletion complete, so the removal is still ours.
		a.complete(rm, "finalizers cleared; gone before the delete")
		return Outcome{}, nil
	}
	if stop, out, err := a.answer(ctx, rm, sentWrite(opDelete, live, rv, sent), err); stop {
		return out, err
	}
	a.complete(rm, "delete")
	return Outcome{}, nil
}

// clearFinalizers patches the live pod's finalizers away. resourceVersion
// in the patch makes it conditional: a pod changed since the re-read fails
// with a conflict instead of being edited blind.
func (a *Actuator) clearFinalizers(ctx context.Context, live *corev1.Pod) (*corev1.Pod, error) {
	patch := fmt.Sprintf(`{"metadata":{"uid":%q,"resourceVersion":%q,"finalizers":null}}`, live.UID, live.ResourceVersion)
	return actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Pod, error) {
		return a.client.CoreV1().Pods(live.Namespace).Patch(ctx, live.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	})
}

// deletePod DELETEs the live pod with UID and resourceVersion (rv)
// preconditions; grace 0 completes a deletion already under way (for a
// Failed pod the API server uses 0 anyway) and is a force deletion.
func (a *Actuator) deletePod(ctx context.Context, live *corev1.Pod, d Decision, rv string) error {
	uid := live.UID
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}
	if d.Action == ForceDelete || live.DeletionTimestamp != nil {
		zero := int64(0)
		opts.GracePeriodSeconds = &zero
	}
	_, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, a.client.CoreV1().Pods(live.Namespace).Delete(ctx, live.Name, opts)
	})
	return err
}

// complete publishes a removal that happened: its journaled outcome (OPS
// and the Kubernetes Event). Its slot stays taken.
func (a *Actuator) complete(rm *removal, how string) {
	if rm.verb != VerbDeletionRequested {
		// The pod is gone (a deletion requested leaves it Terminating,
		// and its later states are decided on again).
		a.removed.add(rm.state.UID, a.cfg.WindowNow())
	}
	a.log.Info().Str("pod", rm.state.Namespace+"/"+rm.state.Name).Str("uid", rm.state.UID).Str("verb", rm.verb).
		Str("reason", rm.d.Reason).Str("how", how).Msg(rm.d.Message)
	a.emitAnnotated(rm.state, rm.d, rm.verb, "", rm.subj, rm.ev, rm.encErr, rm.ann)
}

// answered reports that a write of a removal just answered: its slot counts
// from its last write's answer (by then the write reached the API), and the
// removal's outcome Event, built by complete from ann, carries that time as its
// action time, the one a new leader seeds the removal at (LiveActions).
func (a *Actuator) answered(slot *actuate.Slot, ann map[string]string) {
	at := a.cfg.WindowNow()
	slot.Wrote(at)
	if ann != nil {
		ann[AnnotationActionTime] = actionTime(at)
	}
}

// finalizersPutBack handles a finalizer patch answered with finalizers
// still set: a mutating admission webhook (or another writer) put them
// back. The pod stays, so nothing was removed: no DELETE (it would leave the
// pod Terminating, or answer 200 for a pod that stays), no removal audit,
// and the slot is given back. It is reported failed once, naming the
// finalizers, and retried with the pod's backoff. This is also what the
// journal's recovery concludes: the intent stored before the patch has no
// outcome, and Happened sees the same pod, so a new leader counts it
// pending and publishes nothing (at once: the attempt's answer record says
// none of its writes can still commit).
func (a *Actuator) finalizersPutBack(ctx context.Context, rm *removal, kept []string, sent time.Time) (Outcome, error) {
	rm.release()
	a.answerIntent(ctx, rm, "finalizers kept", sent)
	a.metrics.Rechecks.WithLabelValues("finalizers_put_back").Inc()
	msg := fmt.Sprintf("remove finalizers: the API server answered with finalizers %s set again (a mutating admission webhook?); the pod stays",
		strings.Join(kept, ", "))
	a.reportOnce(rm.state, rm.d, VerbFailed, msg)
	return Outcome{Retry: true}, fmt.Errorf("pod %s/%s: %s", rm.state.Namespace, rm.state.Name, msg)
}

// deletedByUpdate reports whether clearing the finalizers of the live pod
// makes the API server delete it during that update: it is already being
// deleted and its deletion grace period is 0 or unset (the apiserver's
// registry.ShouldDeleteDuringUpdate).
func deletedByUpdate(live *corev1.Pod) bool {
	return live.DeletionTimestamp != nil && (live.DeletionGracePeriodSeconds == nil || *live.DeletionGracePeriodSeconds == 0)
}

// sentWrite describes a write of op to the live pod with resourceVersion
// precondition rv, sent at sent: what its settlement reads, if its answer
// is lost.
func sentWrite(op string, live *corev1.Pod, rv string, sent time.Time) *errInDoubt {
	return &errInDoubt{op: op, rv: rv, sent: sent, deleting: live.DeletionTimestamp != nil, grace: live.DeletionGracePeriodSeconds}
}

// answer handles the answer to the write w of rm (classify); stop is false
// when it was carried out. NotFound: the pod is already gone, which is the
// goal; while an earlier write of this pod that was in doubt may still land
// (doubts.mayLand), that is this removal happening: published, slot kept.
// Conflict: the pod changed (or was recreated) since the re-read; look
// again. 429: not processed; retried with backoff. Any other 4xx is a
// refusal: reported failed once, retried with backoff. Anything else leaves
// the outcome unknown: w (an *errInDoubt) with err, and the slot stays
// taken.
func (a *Actuator) answer(ctx context.Context, rm *removal, w *errInDoubt, err error) (stop bool, out Outcome, _ error) {
	op := w.op
	kind := actuate.Classify(err)
	if kind == actuate.AnswerDone {
		return false, Outcome{}, nil
	}
	// An earlier write that may land until after this one was sent may be
	// what this one found done.
	if kind == actuate.AnswerGone && a.doubts.mayLand(rm.state.UID, w.sent) {
		a.metrics.InDoubt.WithLabelValues(actuate.DoubtApplied).Inc()
		a.complete(rm, op+" answered 404, within the late-commit horizon of an earlier write in doubt")
		return true, Outcome{}, nil
	}
	if kind == actuate.AnswerConflict && op == opDelete && rm.verb != VerbDeletionRequested && !kube.DeleteConflictBeforeStore(err, w.rv) {
		// A DELETE's 409 from its second storage step: the first (the
		// deletion mark of a grace-0 delete) committed and the pod
		// changed before the second, so the pod goes anyway (finalizers
		// pending make a DELETE one step: deletionrequested never gets
		// here). It is in doubt, as a lost answer is (slot kept, nothing
		// published, no answer record), and the settling read tells: the
		// pod marked by it (the removal under way: in doubt until the pod
		// leaves), or moved on without the mark (a quiet re-look). Any
		// other 409 stored nothing: a quiet re-look, as it always was.
		w.err, w.conflict = err, true
		return true, Outcome{}, w
	}
	if kind != actuate.AnswerUnknown {
		rm.release()
	}
	switch {
	case kind == actuate.AnswerGone:
		// Someone else removed the pod (no write of this leader can
		// land: doubts.certain): the next leader must not take the pod's
		// absence for this attempt's removal and publish it.
		a.answerIntent(ctx, rm, kind.String(), w.sent)
	case kind == actuate.AnswerConflict, kind == actuate.AnswerThrottled, kind == actuate.AnswerRefused:
		// Turned away before anything was stored, never applied later:
		// the attempt is over.
		a.answerIntent(ctx, rm, kind.String(), w.sent)
	}
	switch kind {
	case actuate.AnswerGone:
		a.metrics.Rechecks.WithLabelValues("gone").Inc()
		a.removed.add(rm.state.UID, a.cfg.WindowNow())
		return true, Outcome{}, nil
	case actuate.AnswerConflict:
		a.metrics.Rechecks.WithLabelValues("changed").Inc()
		return true, Outcome{Retry: true}, nil
	}
	a.metrics.APIErrors.WithLabelValues(op).Inc()
	switch kind {
	case actuate.AnswerUnknown:
		w.err = err
		return true, Outcome{}, w
	case actuate.AnswerRefused:
		a.reportOnce(rm.state, rm.d, VerbFailed, fmt.Sprintf("%s: %v", op, err))
	}
	return true, Outcome{Retry: true}, fmt.Errorf("%s pod %s/%s: %w", op, rm.state.Namespace, rm.state.Name, err)
}

// answerIntent stores the answer record of rm's intent (actuate.NewAnswer)
// once its attempt ended without removing the pod (refused, turned away, or
// the pod already gone by another's hand) and no write of it can still
// commit: a new leader then takes the attempt for "did not happen" at once,
// instead of waiting out the late-commit horizon for the same pod, or
// publishing a removal it did not make for a pod that is gone. Not while
// an earlier write of the pod may land after this attempt's write was sent
// (a write in doubt, a DELETE's 409, a finalizer patch that went through;
// or that memory is full and may have lost one), and not for an intent OPS
// did not store
// (nothing to answer; a CleanupIntent Event is waited for as before).
func (a *Actuator) answerIntent(ctx context.Context, rm *removal, why string, sent time.Time) {
	ans, ok := a.cfg.Intents.(actuate.Answers)
	if !ok || rm.iev.ID == "" || !a.doubts.certain(rm.state.UID, sent) {
		return
	}
	ans.Answer(ctx, rm.isubj, rm.iev, why)
}

func (a *Actuator) pausedBy() (pause.Record, bool) {
	if a.cfg.Pause == nil {
		return pause.Record{}, false
	}
	return a.cfg.Pause.Paused()
}

// announcePaused publishes, once per pod and pause, the removal a pause
// holds back, as skipped with reason paused. No Kubernetes Event: that is a
// write too, and a pause means none.
func (a *Actuator) announcePaused(pod *events.PodState, d Decision, r pause.Record) {
	if !a.reported.First(pod.UID, VerbSkipped+"/"+pause.Reason+"/"+r.Since.String()) {
		return
	}
	a.log.Info().Str("pod", pod.Namespace+"/"+pod.Name).Stringer("action", d.Action).Str("pause", r.String()).
		Msg("decision held back: paused")
	d.Want, d.Reason, d.Message = d.Action, pause.Reason, d.Reason+": "+d.Message+" (not applied: "+r.String()+")"
	subj, ev, err := a.decisionEvent(pod, d, VerbSkipped, "")
	if err == nil {
		// One id per pod and pause: OPS keeps each pause's message, and a
		// new leader's repeat of the same pause is dropped as a duplicate.
		ev.ID += "/" + strconv.FormatInt(r.Since.UnixNano(), 10)
	}
	a.metrics.Decisions.WithLabelValues(VerbSkipped, pause.Reason).Inc()
	if err != nil {
		a.log.Error().Err(err).Str("pod", pod.Namespace+"/"+pod.Name).Msg("audit message cannot be encoded")
		return
	}
	a.audit.Publish(subj, ev)
}

// pauseRecheck is when a held-back removal is looked at again: at the
// pause's end, and at least every second so that a resume takes effect
// without waiting for the next tick.
func pauseRecheck(r pause.Record, now time.Time) time.Duration {
	if r.Until.IsZero() {
		return time.Second
	}
	return max(min(r.Until.Sub(now), time.Second), 10*time.Millisecond)
}

// reportOnce publishes a decision unless the same verb and reason was already
// published for this pod by this leader (the OPS id dedups across leaders
// within the stream's duplicate window).
func (a *Actuator) reportOnce(pod *events.PodState, d Decision, verb, errMsg string) {
	if a.reported.First(pod.UID, verb+"/"+d.Reason) {
		a.report(pod, d, verb, errMsg)
	}
}

// report emits the Kubernetes Event (not in dry-run: an Event is a write),
// queues the OPS event (stored by the audit publisher, however long OPS is
// away) and counts the decision.
func (a *Actuator) report(pod *events.PodState, d Decision, verb, errMsg string) {
	subj, ev, err := a.decisionEvent(pod, d, verb, errMsg)
	a.emit(pod, d, verb, errMsg, subj, ev, err)
}

// emit emits the Kubernetes Event, counts the decision and queues its OPS
// message (built by decisionEvent; encErr when it could not be encoded).
func (a *Actuator) emit(pod *events.PodState, d Decision, verb, errMsg, subj string, ev envelope.Event, encErr error) {
	a.emitAnnotated(pod, d, verb, errMsg, subj, ev, encErr, nil)
}

// emitAnnotated is emit with annotations on the Kubernetes Event (a
// removal's journal, journal.go).
func (a *Actuator) emitAnnotated(pod *events.PodState, d Decision, verb, errMsg, subj string, ev envelope.Event, encErr error, ann map[string]string) {
	// An Event is a write: none in dry-run, and no skip's while paused (the
	// skip is still published to OPS). A removal's Event is its journal
	// (LiveActions): kept even if a pause began while it was written.
	if _, paused := a.pausedBy(); !a.cfg.DryRun && (!paused || verb != VerbSkipped) {
		a.event(pod, verb, d, errMsg, ann)
	}
	a.metrics.Decisions.WithLabelValues(verb, d.Reason).Inc()
	if encErr != nil {
		a.log.Error().Err(encErr).Str("pod", pod.Namespace+"/"+pod.Name).Msg("audit message cannot be encoded")
		return
	}
	a.audit.Publish(subj, ev)
}

// decisionEvent builds the OPS message of a decision on pod.
func (a *Actuator) decisionEvent(pod *events.PodState, d Decision, verb, errMsg string) (string, envelope.Event, error) {
	now := a.cfg.Now()
	payload := events.CleanupDecision{
		Verb: verb, Action: d.Want.String(), Namespace: pod.Namespace, Pod: pod.Name, PodUID: pod.UID,
		Node: pod.NodeName, Owner: pod.Owner, Phase: pod.Phase, PodReason: pod.Reason,
		Reason: d.Reason, Message: d.Message, AgeSeconds: int64(now.Sub(pod.CreationTimestamp).Seconds()),
		Severity: severity(verb), DryRun: a.cfg.DryRun, Error: errMsg, Time: now,
	}
	ev, err := envelope.New(opsID(pod.UID, verb, d, a.cfg.DryRun), envelope.Source(a.cfg.Cluster, Service), events.TypeCleanup,
		pod.Namespace+"/"+pod.Name, payload, now)
	return subject.Ops(a.cfg.Cluster, Service, verb, pod.Namespace, pod.Name), ev, err
}

// Happened is the live check of a new leader for an intent without its
// outcome in OPS: the removal happened when the pod is gone or another pod
// (another UID) now holds its name; the same pod still there past the
// late-commit horizon of the intent's time means the write did not happen
// (or its deletion is pending); within it the write may still commit, and
// Happened returns an error so the recovery retries, and the normal
// processing of the pod takes it from there; except for a deletionrequested
// intent, whose write leaves the pod Terminating (deletionTimestamp set).
// An answered attempt (actuate.NewAnswer: refused, turned away, or the pod
// already gone when its write came) did not happen, whatever the pod's state
// now: a pod someone else removed since is not this actor's removal.
func (a *Actuator) Happened(ctx context.Context, in events.Intent) (bool, error) {
	if in.Answered != "" {
		return false, nil
	}
	if err := podName(in.Namespace, in.Name); err != nil {
		// client-go refuses such a name before any request: retrying
		// cannot help.
		return false, fmt.Errorf("%w: %v", actuate.ErrUnverifiable, err)
	}
	live, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Pod, error) {
		return a.client.CoreV1().Pods(in.Namespace).Get(ctx, in.Name, metav1.GetOptions{})
	})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		a.metrics.APIErrors.WithLabelValues("get_pod").Inc()
		if actuate.Unverifiable(err) {
			err = fmt.Errorf("%w: %w", actuate.ErrUnverifiable, err)
		}
		return false, fmt.Errorf("re-read pod %s/%s of an intent: %w", in.Namespace, in.Name, err)
	}
	if string(live.UID) != in.UID {
		return true, nil
	}
	// A delete that finalizers hold leaves the same pod, now Terminating:
	// that is the deletionrequested outcome.
	if in.Action == VerbDeletionRequested && live.DeletionTimestamp != nil {
		return true, nil
	}
	// The old leader's write may still commit (its answer was lost as its
	// term ended): the same pod is no proof yet.
	return false, actuate.StillUndecided("pod "+in.Namespace+"/"+in.Name, in.Time, a.horizon(), a.cfg.Now())
}

// podName checks that namespace/name can be a pod's: a namespace is a
// DNS-1123 label, a pod name a DNS-1123 subdomain (what the API server
// validates a pod against, and what client-go can put in a URL).
func podName(namespace, name string) error {
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return fmt.Errorf("namespace %q is not a namespace name: %s", namespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return fmt.Errorf("%q is not a pod name: %s", name, strings.Join(msgs, "; "))
	}
	return nil
}

func (a *Actuator) event(pod *events.PodState, verb string, d Decision, errMsg string, ann map[string]string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)}
	typ, reason, msg := corev1.EventTypeWarning, "", d.Reason+": "+d.Message
	switch verb {
	case VerbDeleted:
		typ, reason = corev1.EventTypeNormal, EventDeleted
	case VerbDeletionRequested:
		typ, reason = corev1.EventTypeNormal, EventDeletionRequested
	case VerbForceDeleted:
		reason = EventForceDeleted
	case VerbSkipped:
		reason = "CleanupSkipped"
	case VerbFailed:
		reason, msg = "CleanupFailed", msg+"; "+errMsg
	default:
		return
	}
	if ann != nil {
		a.recorder.AnnotatedEventf(ref, ann, typ, reason, "%s", msg)
		return
	}
	a.recorder.Event(ref, typ, reason, msg)
}

// opsID names the decision, so a retried publish or a second leader acting on
// the same pod cannot produce two audit events for one decision. A dry-run
// replica's skip gets its own id: it runs beside the real actor (its own
// Lease, docs/actuate.md), and with one id the stream would drop whichever
// of the two skips came second.
func opsID(uid, verb string, d Decision, dryRun bool) string {
	switch verb {
	case VerbDeleted, VerbForceDeleted, VerbDeletionRequested:
		return "cleanup/" + uid + "/" + verb
	case VerbDryRun, VerbFailed:
		return "cleanup/" + uid + "/" + verb + "/" + d.Want.String()
	}
	id := "cleanup/" + uid + "/" + verb + "/" + d.Reason
	if dryRun {
		id += "/dryrun"
	}
	return id
}

func severity(verb string) events.Severity {
	switch verb {
	case VerbFailed:
		return events.SeverityCritical
	case VerbForceDeleted, VerbSkipped:
		return events.SeverityWarning
	}
	return events.SeverityInfo
}

// liveState is the PodState of a live pod, with all its labels (so an opt-out
// label the watcher does not carry still protects the pod). The workload owner
// of the mirror is kept when the live controller is its ReplicaSet.
func liveState(p *corev1.Pod, mirrorOwner *events.Owner) *events.PodState {
	s := &events.PodState{
		Op: events.OpUpsert, UID: string(p.UID), Namespace: p.Namespace, Name: p.Name,
		ResourceVersion: p.ResourceVersion, NodeName: p.Spec.NodeName, Phase: string(p.Status.Phase),
		Reason: p.Status.Reason, CreationTimestamp: p.CreationTimestamp.Time,
		DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds, Finalizers: len(p.Finalizers), Labels: p.Labels,
		FailedAt: kube.PodFailedAt(p), Storage: kube.PodHoldsStorage(p), JobTracking: kube.PodTracksJob(p),
	}
	if p.DeletionTimestamp != nil {
		t := p.DeletionTimestamp.Time
		s.DeletionTimestamp = &t
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		s.Owner = &events.Owner{Kind: ref.Kind, Name: ref.Name}
		if ref.Kind == "ReplicaSet" && mirrorOwner != nil && mirrorOwner.Kind == "Deployment" {
			s.Owner = mirrorOwner
		}
	}
	return s
}

// liveNode is the part of a live node the partition rule reads.
func liveNode(n *corev1.Node) *events.NodeState {
	s := &events.NodeState{Name: n.Name, UID: string(n.UID)}
	s.Ready, s.ReadySince = kube.NodeReady(n)
	for _, t := range n.Spec.Taints {
		s.Taints = append(s.Taints, events.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	return s
}

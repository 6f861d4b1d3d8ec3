package cordon

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// horizon is this actuator's late-commit horizon.
func (a *Actuator) horizon() time.Duration {
	return actuate.LateCommitHorizon(a.cfg.APITimeout, a.cfg.ServerRequestTimeout)
}

// Settling reads of a write in doubt on an unchanged node back off from
// settleBackoffMin, doubling, to settleBackoffMax (and never past the
// horizon): the node's rv moving on decides it earlier, and an idle node's
// never does.
const (
	settleBackoffMin = 500 * time.Millisecond
	settleBackoffMax = 10 * time.Second
)

// doubt is a write whose answer was lost: what is needed to finish it either
// way once a read tells whether it happened. Its rate-window slot stays taken
// whatever the read tells: a write that was in doubt is counted, on the safe
// side.
type doubt struct {
	node   *corev1.Node // as acted on: the patch's preconditions, the Event's object
	d      Decision
	o      written   // the outcome built before the patch (its id, its intent's)
	err    error     // the lost answer
	tr     trace     // the timings of the write
	sent   time.Time // when the patch went out (cfg.Now): the horizon counts from it
	checks int       // settling reads that found the node unchanged so far
	// intent is the intent stored before the patch, not stored yet when
	// unjournaled is set: each settling attempt stores it again, so a
	// leader that dies (or a write that ends unclear) leaves it for the next
	// leader's recovery and its rate window.
	intent      *intentMsg
	unjournaled bool
	// slot is the write's rate-window slot (nil: no window), held while in
	// doubt and settled when a read decides the write: from that read
	// (applied: a late commit counts from when it was seen, not from the
	// lost answer; not applied or unclear: from the decision, never given
	// back).
	slot *actuate.Slot
	// heldLogged: the Warn that another node's write waits for this one was
	// logged (once per doubt, not per node and retry).
	heldLogged bool
}

// intentMsg is a write-ahead intent ready to be stored: its subject and event.
type intentMsg struct {
	subj string
	ev   envelope.Event
}

// verdict is what a read of the node says about a write to it.
type verdict int

const (
	// applied: the node shows the write.
	applied verdict = iota
	// unchanged: the node still has the version the write was
	// preconditioned on; any write changes it, so the write has not
	// happened yet. It is final (not applied) only once the write can no
	// longer commit: past the late-commit horizon.
	unchanged
	// notApplied: unchanged past the late-commit horizon: the write did not
	// happen.
	notApplied
	// pending: unchanged within the horizon: the write may still land and
	// stays in doubt.
	pending
	// unclear: the node moved on without showing the write (someone else
	// wrote first, or undid it since), or is gone or replaced.
	unclear
)

// lookBack reads the node by name with a consistent read (no
// resourceVersion: a quorum read, never an older cache) and tells whether
// it shows the write of verb decided as d on the node with uid; why says
// why not when the verdict is unclear. wasMarked tells that the node the
// write was decided on carried opswire's mark: for an uncordon or a handover,
// a node that moved on without it then shows the write, whatever else
// changed since (only opswire removes its mark). An API error (other than
// NotFound) is returned: nothing can be told then.
func (a *Actuator) lookBack(ctx context.Context, name, uid, verb string, d events.CordonDecision, wasMarked bool) (verdict, *corev1.Node, string, error) {
	node, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Node, error) {
		return a.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	})
	switch {
	case apierrors.IsNotFound(err):
		return unclear, nil, "node no longer exists", nil
	case err != nil:
		return unclear, nil, "", fmt.Errorf("re-read node %s: %w", name, err)
	case string(node.UID) != uid:
		return unclear, node, "node was replaced (uid changed)", nil
	case d.ResourceVersion != "" && node.ResourceVersion == d.ResourceVersion:
		return unchanged, node, "", nil
	}
	if ok, why := patchVisible(a.cfg.Policy, node, verb, d); !ok {
		if wasMarked && d.ResourceVersion != "" && markRemoved(a.cfg.Policy, node, verb, d.ResourceVersion) {
			return applied, node, "", nil
		}
		return unclear, node, why, nil
	}
	return applied, node, "", nil
}

// markRemoved reports whether node shows the release (an uncordon or a
// hand-over) of verb patched against version rv: opswire's label, mark and
// taint gone, and opswire's release record (AnnotationReleased) naming that
// version. Only opswire writes the record and no other opswire write to the
// node goes out while one is in doubt, so on a node that was marked and
// moved on this is the write, even when someone cordoned the node (or lifted
// a person's cordon) since. A person who removed the mark by hand and kept
// the node cordoned left no record of this version: not the release.
func markRemoved(p Policy, node *corev1.Node, verb, rv string) bool {
	if verb != VerbUncordoned && verb != VerbHandedOver {
		return false
	}
	_, labelled := node.Labels[events.LabelAutoCordon]
	_, annotated := node.Annotations[events.AnnotationAutoCordon]
	ourTaint := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule && t.Key == p.TaintKey
	})
	rel, recorded := readRelease(node.Annotations)
	return !labelled && !annotated && !ourTaint && recorded && rel.Verb == verb && rel.RV == rv
}

// carriesMark reports whether node carries opswire's label or mark.
func carriesMark(node *corev1.Node) bool {
	_, labelled := node.Labels[events.LabelAutoCordon]
	_, annotated := node.Annotations[events.AnnotationAutoCordon]
	return labelled || annotated
}

// settle decides the write in doubt with a read of its node, and finishes
// it as that read says, so each write gets exactly one outcome:
//
//   - applied: the success path, as if the answer had arrived (the ledger,
//     lastWrite, the Event, the outcome message with the id built before the
//     patch);
//   - pending: the node still has the version the patch was preconditioned
//     on, and the write may still commit (within actuate.LateCommitHorizon of its
//     sending): it stays in doubt, nothing is published, and retryIn says
//     when to read again (a backoff, never past the horizon);
//   - notApplied: the node still had that version past the horizon: failed,
//     as a refused write (announced once per version);
//   - unclear: nothing is published (the same rule as a new leader's
//     Happened: the live state does not say this write happened).
//
// The slot stays taken in every case: a write that was in doubt counts in
// the rate window (a late commit, or a horizon too short for this API
// server, must not let another write through in its place). It is held
// while the write is pending and settled at the verdict, so the window
// counts the write from the read that decided it (for a late commit: from
// when it was seen, at or after it landed).
//
// When the node cannot be read the write stays in doubt and the error says
// so: no other write goes out until a later call settles it.
func (a *Actuator) settle(ctx context.Context) (v verdict, retryIn time.Duration, err error) {
	w := a.doubt
	if w.unjournaled && w.intent != nil {
		w.unjournaled = !a.cfg.Intents.Record(ctx, w.intent.subj, w.intent.ev)
	}
	v, live, why, err := a.lookBack(ctx, w.node.Name, string(w.node.UID), w.o.verb, w.o.p, carriesMark(w.node))
	if err != nil {
		a.log.Warn().Err(err).AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).
			Msg("write in doubt: its answer was lost and the node cannot be read yet; no other write until it is settled")
		return v, 0, fmt.Errorf("%s %s in doubt (answer lost: %v): %w", w.d.Action, w.node.Name, w.err, err)
	}
	if v == unchanged {
		horizon := a.horizon()
		left := w.sent.Add(horizon).Sub(a.cfg.Now())
		if left > 0 {
			retryIn = min(settleBackoffMin<<min(w.checks, 10), settleBackoffMax, left)
			w.checks++
			ev := a.log.Debug()
			if w.checks == 1 {
				ev = a.log.Info()
			}
			ev.AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).Dur("left", left).Dur("retryIn", retryIn).
				Msg("write in doubt: the node is unchanged, but the write may still commit; no other write until it is settled")
			return pending, retryIn, nil
		}
		v = notApplied
	}
	a.doubt = nil
	w.slot.Settle(a.cfg.Now())
	switch v {
	case applied:
		a.m.WritesInDoubt.WithLabelValues(actuate.DoubtApplied).Inc()
	case notApplied:
		a.m.WritesInDoubt.WithLabelValues(actuate.DoubtNotApplied).Inc()
	default:
		a.m.WritesInDoubt.WithLabelValues(actuate.DoubtUnclear).Inc()
	}
	switch v {
	case applied:
		a.log.Info().AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).Msg("write in doubt: the node shows it; finishing it")
		a.done(w.node, w.d, w.o, live.ResourceVersion, w.tr)
	case notApplied:
		// It can no longer commit: its answer record lets a new leader
		// trust a later attempt's of the same outcome id
		// (actuate.LatestAttempts waits for every attempt answered).
		a.answerIntent(ctx, w.intent, !w.unjournaled, "not applied")
		a.fail(w.node, w.d, fmt.Errorf("%w (answer lost; the node was unchanged %s after the write, when it could no longer commit)",
			w.err, a.horizon()))
	default:
		a.log.Warn().AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).Str("why", why).
			Msg("write in doubt: the node does not show it and moved on; no outcome published")
	}
	return v, 0, nil
}

package cleanup

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/actuate"
)

// A removal write (the finalizer PATCH or the DELETE) whose answer is lost
// or late (cleanup's own deadline, a reset connection, a 5xx, the API
// server's 504 "may still be processing") may have happened. Taken for a
// refusal, it would be published failed with its slot given back, and the
// retry's re-read would find the pod gone and publish nothing: a removal
// never audited and not counted. Such a write is *in doubt* instead:
// nothing is published, the slot is kept, the write is not sent again, and
// the removal (its journaled outcome) is remembered until it is settled:
// the pod gone, or another UID under its name, means it happened and its
// outcome is published as if the answer had come.
//
// The same pod still there is no proof that it did not: the API server's
// timeout filter answers 504 and lets the handler run on, and a read (even
// a quorum read) does not wait for a write still in progress, so the write
// can commit after a read that saw the pod unchanged; its preconditions
// (UID and resourceVersion) still hold then, and a retry's DELETE answered
// 404 would leave a removal by this leader audited failed, never deleted,
// and not counted. What the read may conclude,
// per write (judge):
//   - the resourceVersion is the write's precondition: the write may still
//     land, so it stays in doubt, until the late-commit horizon has passed since it
//     was sent; then it did not happen (final);
//   - it moved on without the write's mark: the precondition can no longer
//     hold, so the write can never land: it did not happen (final);
//   - the DELETE's mark (deletionTimestamp set, or its grace period
//     shortened): the API server carries out a DELETE as an update that marks
//     the pod, then (grace 0, no finalizers) a removal at the new
//     resourceVersion, so a read between the two sees the mark of our very
//     write. For a deletion requested (finalizers keep the pod) that is the
//     outcome: it happened. Otherwise the removal is under way: in doubt
//     until the pod leaves or the horizon passes;
//   - the finalizer PATCH's mark (no finalizers left): the patch is done
//     (ours or the finalizers' own controllers'), the removal is not: the
//     slot is given back and the pod handled as usual (its DELETE follows),
//     with nothing reported.
// A write that did not happen is reported failed (once), its slot given
// back and the pod handled as usual (the write retried). For the horizon
// after the write in doubt was sent, a retry's 404 counts as this removal
// happening (the pod gone: the same conclusion the settling read draws).

// minRecheck is the shortest wait between two settling reads of a write in
// doubt. The waits double with the time since the write was sent (the
// settling reads come at about 2, 4, 8 ... times the answer's delay) and end
// at the horizon, so a write in doubt costs a handful of GETs, never a
// spin; the mirror's news of the pod (it left, it changed) settles it sooner.
const minRecheck = time.Second

// Write kinds: the op of an errInDoubt.
const (
	opRemoveFinalizers = "remove finalizers"
	opDelete           = "delete"
)

// errInDoubt is the error of a write whose answer left its outcome unknown.
type errInDoubt struct {
	op  string // opRemoveFinalizers or opDelete
	err error
	// The write as sent: its resourceVersion precondition, when it was sent
	// (the window's monotonic clock), and the pod's deletion state before
	// it (what a DELETE's mark is told from).
	rv       string
	sent     time.Time
	deleting bool
	grace    *int64
	// conflict: the answer came, a 409 (a DELETE's: its first storage
	// step may have committed), and is final: settled not happened, it
	// is no failure, and it cannot land later.
	conflict bool
}

func (e *errInDoubt) Error() string { return e.op + ": " + e.err.Error() }

// lostWhat says why the write was in doubt, for its outcome's message.
func (e *errInDoubt) lostWhat() string {
	if e.conflict {
		return "answered 409 after its deletion mark may have committed"
	}
	return "its answer was lost"
}
func (e *errInDoubt) Unwrap() error { return e.err }

// maxDoubts bounds the removals remembered in doubt (and, apart, the pods
// whose earlier write in doubt may still land: late). Past it a write whose
// answer is lost is reported failed and retried (a report, never silence),
// and its slot is kept: it may have happened, so it counts.
const maxDoubts = 4096

// doubts are the removal writes of this leader that were sent and not yet
// answered (sending), or whose answer was lost (waiting to be settled), by
// pod UID. An entry lives from the write to a definite answer or its
// settlement, so memory is bounded by the writes in flight or in doubt. The
// mirror seeing the pod leave settles a write in doubt (it happened), even
// when that news comes while the write is still on its way: a lost answer
// is typically late by the whole API deadline, while the pod's removal
// reaches the mirror within moments, and the controller takes up no pod the
// mirror removed (a visit already under way then finds its UID among the
// removed: Actuator.Forget).
type doubts struct {
	mu sync.Mutex
	m  map[string]*doubt
	// late holds, by pod UID, until when an earlier write of a removal may
	// still remove the pod (a retry's 404 then counts as it happening): one
	// that was in doubt and settled as not happened, or whose lost answer
	// was not tracked; a DELETE answered 409 (its deletion mark may have
	// committed); a finalizer patch that went through (the deletion it
	// unblocked). Entries expire; bounded by maxDoubts.
	late map[string]time.Time
	// dropped is until when a write that late had no room for may still
	// land: no pod is certain (certain) before then.
	dropped time.Time
}

type doubt struct {
	rm      *removal
	sending bool // the write is on its way
	gone    bool // the mirror saw the pod leave meanwhile
}

func newDoubts() *doubts { return &doubts{m: map[string]*doubt{}, late: map[string]time.Time{}} }

// lateUntil remembers that an earlier write of uid may land until until.
func (s *doubts) lateUntil(uid string, until, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.late) >= maxDoubts {
		for k, t := range s.late {
			if !now.Before(t) {
				delete(s.late, k)
			}
		}
		if len(s.late) >= maxDoubts {
			if until.After(s.dropped) {
				s.dropped = until
			}
			return
		}
	}
	if until.After(s.late[uid]) {
		s.late[uid] = until
	}
}

// mayLand reports whether an earlier write of uid in doubt may still land
// at now.
func (s *doubts) mayLand(uid string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.late[uid]
	if ok && !now.Before(t) {
		delete(s.late, uid)
		return false
	}
	return ok
}

// certain reports that no earlier write of uid can still land: none is
// remembered as one that may, and none the memory of those had no room for
// (lateUntil) may still land either. Being full now is not the test: one
// dropped while it was full may still land after it drained.
func (s *doubts) certain(uid string, now time.Time) bool {
	if s.mayLand(uid, now) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !now.Before(s.dropped)
}

// send records that a write of rm is on its way. False: the memory is full,
// and the write is not tracked.
func (s *doubts) send(rm *removal) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[rm.state.UID]; !ok && len(s.m) >= maxDoubts {
		return false
	}
	s.m[rm.state.UID] = &doubt{rm: rm, sending: true}
	return true
}

// answered drops the write of uid: its answer said what happened.
func (s *doubts) answered(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, uid)
}

// unanswered keeps the write of uid in doubt, waiting to be settled. It
// returns true (and drops it) when the mirror saw the pod leave while the
// write was on its way: it happened.
func (s *doubts) unanswered(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.m[uid]
	switch {
	case d == nil:
		return false
	case d.gone:
		delete(s.m, uid)
		return true
	}
	d.sending = false
	return false
}

// waiting is the removal of uid in doubt, nil when there is none.
func (s *doubts) waiting(uid string) *removal {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.m[uid]; d != nil && !d.sending {
		return d.rm
	}
	return nil
}

// resend turns the removal of uid in doubt back into a write on its way
// (finish sends its removal step again), in one step: the mirror seeing the
// pod leave in between would otherwise find no entry to mark (found by
// review). False: there is none (the mirror settled it meanwhile).
func (s *doubts) resend(uid string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.m[uid]
	if d == nil || d.sending {
		return false
	}
	d.sending, d.gone = true, false
	return true
}

// take drops and returns the removal of uid in doubt: whoever takes it
// settles it (the worker or the mirror's handler), so it is settled once.
func (s *doubts) take(uid string) *removal {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.m[uid]
	if d == nil || d.sending {
		return nil
	}
	delete(s.m, uid)
	return d.rm
}

// left is the mirror seeing the pod of uid leave: a removal in doubt is
// taken and returned (it happened); a write on its way is marked, so that
// its lost answer is known to have happened.
func (s *doubts) left(uid string) *removal {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.m[uid]
	switch {
	case d == nil:
		return nil
	case d.sending:
		d.gone = true
		return nil
	}
	delete(s.m, uid)
	return d.rm
}

// forget drops what is remembered about uid's late writes (the pod left),
// unless a write of uid is on its way: its 404 may be an earlier write
// having landed (mayLand), which is what the mirror saw.
func (s *doubts) forget(uid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.m[uid]; d != nil && d.sending {
		return
	}
	delete(s.late, uid)
}

// unanswered handles a removal write whose answer was lost: nothing is
// published, the write is not sent again, and the slot is kept until it is
// settled (resolve, or the mirror seeing the pod leave); the pod is visited
// again to settle it (recheck). Untracked (the memory of doubts is full):
// reported failed and retried, and the slot kept (it may have happened).
func (a *Actuator) unanswered(rm *removal, lost *errInDoubt, tracked bool) (Outcome, error) {
	pod := rm.state.Namespace + "/" + rm.state.Name
	if !tracked {
		// Not settled, but it may still land until its horizon: as for a
		// write settled not happened (resolve), a retry's 404 is this
		// removal, and no answer record says nothing can land.
		a.doubts.lateUntil(rm.state.UID, lost.sent.Add(a.horizon()), a.cfg.WindowNow())
		if !lost.conflict { // a 409 is no failure: the removal may be under way
			a.reportOnce(rm.state, rm.d, VerbFailed, lost.Error())
		}
		return Outcome{Retry: true}, fmt.Errorf("pod %s: %w (too many writes in doubt to remember this one)", pod, lost)
	}
	rm.lost = lost
	if lost.conflict {
		a.metrics.InDoubt.WithLabelValues(actuate.DoubtConflict).Inc()
	} else {
		a.metrics.InDoubt.WithLabelValues(actuate.DoubtUnanswered).Inc()
	}
	if a.doubts.unanswered(rm.state.UID) {
		a.metrics.InDoubt.WithLabelValues(actuate.DoubtApplied).Inc()
		a.complete(rm, lost.op+"; "+lost.lostWhat()+", and the pod left meanwhile")
		return Outcome{}, nil
	}
	if lost.conflict {
		// Looked at again at once: a 409 usually means the pod changed.
		a.log.Info().Err(lost).Str("pod", pod).Str("uid", rm.state.UID).Str("verb", rm.verb).
			Msg("a DELETE answered 409 may have begun the removal: in doubt until the pod is read again")
		return Outcome{Retry: true}, nil
	}
	a.log.Warn().Err(lost).Str("pod", pod).Str("uid", rm.state.UID).Str("verb", rm.verb).
		Msg("the answer to a removal write was lost: in doubt until the pod is read again")
	return Outcome{RequeueAfter: a.recheck(lost.sent)}, nil
}

// horizon is how long after it was sent a write in doubt may still land.
func (a *Actuator) horizon() time.Duration {
	return actuate.LateCommitHorizon(a.cfg.APITimeout, a.cfg.ServerRequestTimeout)
}

// recheck is the wait before the next settling read of a write sent at
// sent: as long as the time since (at least minRecheck), and never past the
// horizon.
func (a *Actuator) recheck(sent time.Time) time.Duration {
	now := a.cfg.WindowNow()
	next := max(now.Sub(sent), minRecheck)
	if left := sent.Add(a.horizon()).Sub(now); left > 0 && left < next {
		next = left
	}
	return next
}

// verdict is what a settling read concludes about a write in doubt.
type verdict int

const (
	stillInDoubt verdict = iota // it may still land
	happened                    // the removal happened: publish its outcome
	notHappened                 // final: it did not and cannot land any more
	patched                     // the finalizer patch's effect is there; the removal goes on
)

// judge reads the live pod (same UID) for the write in doubt w of rm
// (package comment above: per write kind).
func (a *Actuator) judge(rm *removal, w *errInDoubt, live *corev1.Pod) (verdict, string) {
	over := !a.cfg.WindowNow().Before(w.sent.Add(a.horizon()))
	if w.conflict {
		// A 409 answered: nothing of the DELETE can land later, so the
		// horizon decides nothing (our own mark settled past it must not
		// be published failed). The pod at the version sent
		// got nothing (a mark is a write); our mark is the removal under
		// way; anything else moved on without it.
		if live.ResourceVersion != w.rv && ownMark(w, live) {
			return stillInDoubt, markedByIt
		}
		return notHappened, changedWithout
	}
	if live.ResourceVersion == w.rv {
		if over {
			return notHappened, "the pod is unchanged past the late-commit horizon"
		}
		return stillInDoubt, ""
	}
	if w.op == opRemoveFinalizers {
		if len(live.Finalizers) == 0 {
			return patched, ""
		}
		return notHappened, changedWithout
	}
	switch {
	case !ownMark(w, live):
		return notHappened, changedWithout
	case rm.verb == VerbDeletionRequested:
		return happened, "the pod is Terminating"
	case over:
		return notHappened, "the pod is still there, marked for deletion, past the late-commit horizon"
	}
	return stillInDoubt, markedByIt // the DELETE's first step: the pod's removal follows
}

// ownMark reports whether the live pod carries the mark of the DELETE w: a
// deletionTimestamp newly set, or, on a pod already being deleted, its
// grace period cut to 0 (what a force delete sends); a grace changed to
// anything else is someone else's.
func ownMark(w *errInDoubt, live *corev1.Pod) bool {
	return live.DeletionTimestamp != nil && (!w.deleting ||
		!sameGrace(w.grace, live.DeletionGracePeriodSeconds) && live.DeletionGracePeriodSeconds != nil && *live.DeletionGracePeriodSeconds == 0)
}

// markedByIt is judge's reason for a pod that carries the DELETE's mark.
const markedByIt = "the pod carries its deletion mark"

// finish sends the removal step of rm again, to the live pod that carries
// its DELETE's mark (the DELETE was answered 409 by its second storage
// step): the same removal, its slot and intent, nothing new. The mark stands
// whatever the answer, so the removal is this one's from then on: the pod
// gone (200, 404, or the mirror seeing it leave) publishes it; any other
// answer (409, a refusal, a 429, a lost one) keeps it in doubt, its slot
// kept and nothing reported, and the next visit sends the step again
// (recheck: waits that grow with the time since the 409). Sent as a new
// write instead, a second 409 or a refusal would drop the removal and take
// its slot back, and a lost answer would publish failed, then deleted.
func (a *Actuator) finish(ctx context.Context, rm *removal, live *corev1.Pod) Outcome {
	uid := rm.state.UID
	if !a.doubts.resend(uid) {
		return Outcome{} // the mirror saw the pod leave and settled it meanwhile
	}
	// The removal counts from its first DELETE's answer, as it already
	// does in the window: the mark it committed made the pod go. (Not
	// answered: the outcome Event's action time, which a new leader seeds
	// from, keeps saying the same.)
	err := a.deletePod(ctx, live, rm.d, live.ResourceVersion)
	if err == nil || apierrors.IsNotFound(err) {
		a.doubts.answered(uid)
		a.complete(rm, "a DELETE answered 409 after its deletion mark; its removal step sent again")
		return Outcome{}
	}
	a.metrics.APIErrors.WithLabelValues(opDelete).Inc()
	if a.doubts.unanswered(uid) {
		a.complete(rm, "a DELETE answered 409 after its deletion mark, and the pod left meanwhile")
		return Outcome{}
	}
	a.log.Info().Err(err).Str("pod", rm.state.Namespace+"/"+rm.state.Name).Str("uid", uid).
		Msg("the removal step sent again after a 409 that followed the deletion mark was not carried out; sent again later")
	return Outcome{RequeueAfter: a.recheck(rm.lost.sent)}
}

// changedWithout is judge's reason for a pod that moved on without the
// write: its precondition can no longer hold, so it never lands.
const changedWithout = "the pod changed without it since"

func sameGrace(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// resolve settles a removal of pod uid in doubt, on the pod's next visit,
// with one GET. It happened (the pod gone, another UID under its name, or
// judge): its journaled outcome is published (same id, same Event) and its
// slot kept; settled is true. Still in doubt: nothing changes, settled is
// true and the pod is visited again (recheck). It did not happen (judge,
// final): the slot is given back, it is reported failed (once), and settled
// is false, so the caller handles the pod as usual (a retry of the write);
// for a finalizer patch whose effect is there, the same without the report.
// A failed re-read keeps it in doubt for the next visit.
func (a *Actuator) resolve(ctx context.Context, uid string) (settled bool, out Outcome, err error) {
	rm := a.doubts.waiting(uid)
	if rm == nil {
		return false, Outcome{}, nil
	}
	ns, name := rm.state.Namespace, rm.state.Name
	live, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.Pod, error) {
		return a.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	})
	v, why := happened, "the pod is gone"
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		a.metrics.APIErrors.WithLabelValues("get_pod").Inc()
		return true, Outcome{Retry: true}, fmt.Errorf("settle the %s of pod %s/%s, whose answer was lost: %w", rm.lost.op, ns, name, err)
	case string(live.UID) != uid:
		why = "another pod holds its name"
	default:
		v, why = a.judge(rm, rm.lost, live)
	}
	if v == stillInDoubt && rm.lost.conflict && why == markedByIt {
		// A 409 after our mark: the API server gave up the removal step,
		// which nothing else may ever take (no kubelet). The same removal
		// (its intent, slot and outcome) is finished by its DELETE sent
		// again now, at the marked version; a 404 is its pod gone, this
		// removal. Waited out, it would be published failed, then
		// deleted; handed back to the caller, a force delete's re-decision
		// would wait 5 minutes more (the mark moved the deletionTimestamp
		// to now), and the pod's going would never be audited.
		return true, a.finish(ctx, rm, live), nil
	}
	if v == stillInDoubt {
		return true, Outcome{RequeueAfter: a.recheck(rm.lost.sent)}, nil
	}
	if a.doubts.take(uid) == nil {
		return true, Outcome{}, nil // the mirror saw the pod leave and settled it meanwhile
	}
	if v == happened {
		a.metrics.InDoubt.WithLabelValues(actuate.DoubtApplied).Inc()
		a.complete(rm, rm.lost.op+"; "+rm.lost.lostWhat()+", and "+why)
		return true, Outcome{}, nil
	}
	a.metrics.InDoubt.WithLabelValues(actuate.DoubtNotApplied).Inc()
	rm.release()
	if rm.lost.conflict && why == changedWithout {
		// The 409 was answered and the pod moved on without its mark:
		// nothing of it was stored, and nothing can be (a quiet re-look,
		// and the attempt's answer record).
		a.metrics.Rechecks.WithLabelValues("changed").Inc()
		a.answerIntent(ctx, rm, actuate.AnswerConflict.String(), rm.lost.sent)
		return false, Outcome{}, nil
	}
	now := a.cfg.WindowNow()
	a.doubts.lateUntil(uid, rm.lost.sent.Add(a.horizon()), now)
	if v == notHappened {
		a.reportOnce(rm.state, rm.d, VerbFailed, rm.lost.Error()+"; "+rm.lost.lostWhat()+", and "+why)
	}
	return false, Outcome{}, nil
}

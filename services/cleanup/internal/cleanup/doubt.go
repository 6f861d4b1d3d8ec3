package cleanup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/opswire/opswire/shared/events"
)

// A removal write (the finalizer PATCH or the DELETE) whose answer is lost
// or late (cleanup's own deadline, a reset connection, a 5xx, the API
// server's 504 "may still be processing") may have happened. Taking it for a
// refusal published failed and gave the slot back, and the retry's re-read
// then found the pod gone and published nothing: a removal never audited
// and not counted (found by review). Such a write is *in doubt* instead:
// nothing is published, the slot is kept, and the removal (its journaled
// outcome) is remembered until it is settled the way a new leader's
// recovery settles an intent (Happened): the pod gone, or another UID under
// its name, means it happened and its outcome is published as if the answer
// had come; the same pod still there means it did not, which is then
// reported failed and the pod is handled as usual.

// answer is what the API server's answer to a write says about it.
type answer int

const (
	answerDone      answer = iota // carried out
	answerGone                    // 404: the pod is gone (the goal)
	answerChanged                 // 409: the pod changed since it was read
	answerThrottled               // 429: not processed (priority and fairness, max in flight)
	answerRefused                 // any other 4xx: admission denied, forbidden, invalid
	answerUnknown                 // no answer, a timeout, a 5xx: it may have happened
)

// classify reads a write's error. Only a status the API server wrote
// itself tells what happened: a 4xx is decided before anything is stored,
// and 429 is given before the request is processed. Everything else leaves
// the outcome unknown: an error without a status (a deadline, a
// cancellation, a transport error: the request may have been carried out
// and only its answer lost), a timeout status (504, or 500 ServerTimeout:
// "may still be processing"), a 408, and any other 5xx (an etcd timeout is
// a 500; a proxy's 502 or 503 may come after it forwarded the request).
func classify(err error) answer {
	if err == nil {
		return answerDone
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return answerUnknown
	}
	code := int(st.Status().Code)
	switch {
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || code == http.StatusRequestTimeout:
		return answerUnknown
	case apierrors.IsNotFound(err):
		return answerGone
	case apierrors.IsConflict(err):
		return answerChanged
	case apierrors.IsTooManyRequests(err):
		return answerThrottled
	case code >= 400 && code < 500:
		return answerRefused
	}
	return answerUnknown
}

// errInDoubt is the error of a write whose answer left its outcome unknown.
type errInDoubt struct {
	op  string
	err error
}

func (e *errInDoubt) Error() string { return e.op + ": " + e.err.Error() }
func (e *errInDoubt) Unwrap() error { return e.err }

// maxDoubts bounds the removals remembered in doubt. Past it a write whose
// answer is lost is reported failed, as before (a report, never silence).
const maxDoubts = 4096

// doubts are the removal writes of this leader that were sent and not yet
// answered (sending), or whose answer was lost (waiting to be settled), by
// pod UID. An entry lives from the write to a definite answer or its
// settlement, so memory is bounded by the writes in flight or in doubt. The
// mirror seeing the pod leave settles a write in doubt (it happened), even
// when that news comes while the write is still on its way: a lost answer
// is typically late by the whole API deadline, while the pod's removal
// reaches the mirror within moments, and the controller no longer visits a
// pod the mirror removed.
type doubts struct {
	mu sync.Mutex
	m  map[string]*doubt
}

type doubt struct {
	rm      *removal
	sending bool // the write is on its way
	gone    bool // the mirror saw the pod leave meanwhile
}

func newDoubts() *doubts { return &doubts{m: map[string]*doubt{}} }

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

// unanswered handles a removal write whose answer was lost: nothing is
// published and the slot is kept until it is settled (resolve, or the
// mirror seeing the pod leave). Untracked (the memory of doubts is full):
// reported failed and retried, as before.
func (a *Actuator) unanswered(rm *removal, lost *errInDoubt, tracked bool) (Outcome, error) {
	pod := rm.state.Namespace + "/" + rm.state.Name
	if !tracked {
		rm.release()
		a.reportOnce(rm.state, rm.d, VerbFailed, lost.Error())
		return Outcome{Retry: true}, fmt.Errorf("pod %s: %w (too many writes in doubt to remember this one)", pod, lost)
	}
	rm.lost = lost
	a.metrics.InDoubt.WithLabelValues("unanswered").Inc()
	if a.doubts.unanswered(rm.state.UID) {
		a.metrics.InDoubt.WithLabelValues("happened").Inc()
		a.complete(rm, lost.op+"; its answer was lost, and the pod left meanwhile")
		return Outcome{}, nil
	}
	a.log.Warn().Err(lost).Str("pod", pod).Str("uid", rm.state.UID).Str("verb", rm.verb).
		Msg("the answer to a removal write was lost: in doubt until the pod is read again")
	return Outcome{Retry: true}, nil
}

// resolve settles a removal of pod uid in doubt, on the pod's next visit,
// the way a new leader settles an intent (Happened). It happened: its
// journaled outcome is published (same id, same Event) and its slot kept;
// settled is true. It did not (the same pod is still there): the slot is
// given back, it is reported failed (once), and settled is false, so the
// caller handles the pod as usual (a retry of the write). A failed re-read
// keeps it in doubt for the next visit.
func (a *Actuator) resolve(ctx context.Context, uid string) (settled bool, out Outcome, err error) {
	rm := a.doubts.waiting(uid)
	if rm == nil {
		return false, Outcome{}, nil
	}
	in := events.Intent{Action: rm.verb, Namespace: rm.state.Namespace, Name: rm.state.Name, UID: uid}
	happened, err := a.Happened(ctx, in)
	if err != nil {
		return true, Outcome{Retry: true}, fmt.Errorf("settle the %s of pod %s/%s, whose answer was lost: %w",
			rm.lost.op, in.Namespace, in.Name, err)
	}
	if a.doubts.take(uid) == nil {
		return true, Outcome{}, nil // the mirror saw the pod leave and settled it meanwhile
	}
	if happened {
		a.metrics.InDoubt.WithLabelValues("happened").Inc()
		a.complete(rm, rm.lost.op+"; its answer was lost, and the pod is gone")
		return true, Outcome{}, nil
	}
	a.metrics.InDoubt.WithLabelValues("not_happened").Inc()
	rm.release()
	a.reportOnce(rm.state, rm.d, VerbFailed, rm.lost.Error()+"; its answer was lost, and the pod is still there")
	return false, Outcome{}, nil
}

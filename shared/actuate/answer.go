package actuate

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/opswire/opswire/shared/subject"
)

// Answer is what the API server's answer to a write says about it. Both
// actors read every write's error through Classify, so a status is judged the
// same whichever actor sent the write.
type Answer int

const (
	// AnswerDone: the write was carried out.
	AnswerDone Answer = iota
	// AnswerGone: 404, the object is gone.
	AnswerGone
	// AnswerConflict: 409, the object changed since it was read.
	AnswerConflict
	// AnswerThrottled: 429, given before the request is processed (priority
	// and fairness, max in flight, a server shutting down).
	AnswerThrottled
	// AnswerRefused: any other 4xx (admission denied, forbidden, invalid),
	// decided before anything is stored.
	AnswerRefused
	// AnswerUnknown: no answer, a timeout or a 5xx: the write may have been
	// applied.
	AnswerUnknown
)

// String names the answer, as an intent's answer record says it.
func (a Answer) String() string {
	switch a {
	case AnswerDone:
		return "done"
	case AnswerGone:
		return "gone"
	case AnswerConflict:
		return "conflict"
	case AnswerThrottled:
		return "throttled"
	case AnswerRefused:
		return "refused"
	}
	return "unknown"
}

// Classify reads a write's error. Only a status the API server wrote itself
// tells what happened: a 4xx is decided before anything is stored, and a 429
// before the request is processed (client-go sends no write again on its own,
// kube.NoWriteRetries, so no earlier attempt of it can have been applied).
// Everything else leaves the outcome unknown:
//   - an error without a status: a deadline, a cancellation, a reset
//     connection; the request may have been carried out and only its answer
//     lost;
//   - a timeout status (504, or 500 ServerTimeout: "may still be
//     processing");
//   - a 408: no API server sends one itself; a proxy in front of it timed the
//     request out, and the request may have gone on;
//   - any other 5xx: an etcd timeout is a 500; a proxy's 502 or 503 may come
//     after it forwarded the request.
func Classify(err error) Answer {
	if err == nil {
		return AnswerDone
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return AnswerUnknown
	}
	code := int(st.Status().Code)
	switch {
	case apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || code == http.StatusRequestTimeout:
		return AnswerUnknown
	case apierrors.IsNotFound(err):
		return AnswerGone
	case apierrors.IsConflict(err):
		return AnswerConflict
	case apierrors.IsTooManyRequests(err):
		return AnswerThrottled
	case code >= 400 && code < 500:
		return AnswerRefused
	}
	return AnswerUnknown
}

// LateCommitMargin is added to the late-commit horizon for what the timeouts
// do not bound: an etcd proposal already under way when the API server's
// request timeout ends the handler's context (raft commits it a little after;
// an etcd leader change takes seconds), a handler that only notices its
// context at its next storage call, and clocks that do not tick alike.
const LateCommitMargin = 20 * time.Second

// LateCommitHorizon is how long after a write was sent a lost answer leaves
// it able to commit: the server received it at the latest when the client
// gave up on it (apiTimeout), then ran it for up to its own request timeout
// (serverTimeout: DefaultServerRequestTimeout unless the cluster's API server
// runs with another), plus LateCommitMargin. Until then an unchanged object is
// no proof the write did not happen (a read, even a quorum read, does not wait
// for a write still in progress); after it, it is.
func LateCommitHorizon(apiTimeout, serverTimeout time.Duration) time.Duration {
	return apiTimeout + serverTimeout + LateCommitMargin
}

// ErrNotYetDecided: the live object does not show an intent's write, which
// may still commit (within the late-commit horizon of the intent's time).
// Transient, unlike ErrUnverifiable: SeedAndRecover retries the recovery, and
// the new leader writes nothing before it completes.
var ErrNotYetDecided = errors.New("not decided yet")

// StillUndecided returns an ErrNotYetDecided error for an intent of object
// sent at sent when now is within horizon of it (its write may still
// commit), and nil after.
func StillUndecided(object string, sent time.Time, horizon time.Duration, now time.Time) error {
	until := sent.Add(horizon)
	if !now.Before(until) {
		return nil
	}
	return fmt.Errorf("%s unchanged, but the intent's write may still commit until %s (late-commit horizon): %w",
		object, until.UTC().Format(time.RFC3339), ErrNotYetDecided)
}

// IntentSubjects is the filter of an actor's write-ahead intents,
// ops.<cluster>.<actor>.intent.>.
func IntentSubjects(cluster, actor string) string {
	return subject.Ops(cluster, actor, VerbIntent) + ".>"
}

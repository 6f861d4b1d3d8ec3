package cordon

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

// inDoubt reports whether a write's error leaves open whether the API
// applied it. Only an answer from the API server that refused the request
// (a 4xx status) says it did not: a client timeout, a cancelled context, a
// reset connection, a 5xx (a 504 or 500 timeout: the server may still commit
// the write to etcd; a 503 from a proxy in front of it) or a 429 (client-go
// retries those, and an earlier attempt may have been applied) do not. 404
// and 409 are refusals the caller handles before this.
func inDoubt(err error) bool {
	if err == nil {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // no answer from the API server at all
	}
	code := status.Status().Code
	refused := code >= http.StatusBadRequest && code < http.StatusInternalServerError && code != http.StatusTooManyRequests
	return !refused
}

// doubt is a write whose answer was lost: what is needed to finish it either
// way once a read tells whether it happened.
type doubt struct {
	node    *corev1.Node // as acted on: the patch's preconditions, the Event's object
	d       Decision
	o       written // the outcome built before the patch (its id, its intent's)
	release func()  // gives the rate-window slot back
	err     error   // the lost answer
	tr      trace
}

// verdict is what a read of the node says about a write to it.
type verdict int

const (
	// applied: the node shows the write.
	applied verdict = iota
	// notApplied: the node still has the version the write was
	// preconditioned on; any write changes it, so this one did not happen.
	notApplied
	// unclear: the node moved on without showing the write (someone else
	// wrote first, or undid it since), or is gone or replaced.
	unclear
)

// lookBack reads the node by name with a consistent read (no
// resourceVersion: a quorum read, never an older cache) and tells whether
// it shows the write of verb decided as d on the node with uid; why says
// why not when the verdict is unclear. An API error (other than NotFound)
// is returned: nothing can be told then.
func (a *Actuator) lookBack(ctx context.Context, name, uid, verb string, d events.CordonDecision) (verdict, *corev1.Node, string, error) {
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
		return notApplied, node, "", nil
	}
	if ok, why := patchVisible(a.cfg.Policy, node, verb, d); !ok {
		return unclear, node, why, nil
	}
	return applied, node, "", nil
}

// settle decides the write in doubt with a read of its node, and finishes
// it as that read says, so each write gets exactly one outcome:
//
//   - applied: the success path, as if the answer had arrived (the ledger,
//     lastWrite, the Event, the outcome message with the id built before the
//     patch); the slot stays taken;
//   - notApplied: failed, as a refused write (announced once per version),
//     and the slot is given back;
//   - unclear: nothing is published (the same rule as a new leader's
//     Happened: the live state does not say this write happened) and the
//     slot stays taken, on the safe side.
//
// When the node cannot be read the write stays in doubt and the error says
// so: no other write goes out until a later call settles it.
func (a *Actuator) settle(ctx context.Context) (verdict, error) {
	w := a.doubt
	v, live, why, err := a.lookBack(ctx, w.node.Name, string(w.node.UID), w.o.verb, w.o.p)
	if err != nil {
		a.log.Warn().Err(err).AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).
			Msg("write in doubt: its answer was lost and the node cannot be read yet; no other write until it is settled")
		return v, fmt.Errorf("%s %s in doubt (answer lost: %v): %w", w.d.Action, w.node.Name, w.err, err)
	}
	a.doubt = nil
	switch v {
	case applied:
		a.log.Info().AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).Msg("write in doubt: the node shows it; finishing it")
		a.done(w.node, w.d, w.o, live.ResourceVersion, w.tr)
	case notApplied:
		w.release()
		a.fail(w.node, w.d, w.err)
	default:
		a.log.Warn().AnErr("lost", w.err).Str("node", w.node.Name).Str("id", w.o.id).Str("why", why).
			Msg("write in doubt: the node does not show it and moved on; no outcome published")
	}
	return v, nil
}

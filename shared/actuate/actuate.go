// Package actuate is the write path every opswire actor shares: the one
// return contract of an actuator (Outcome), the per-call API deadline, the
// announce-once set of decisions that persist across ticks, the audit
// publisher that keeps every OPS message until it is stored, and the
// failover-proof sliding rate window. A new actor follows docs/actuate.md and
// uses these pieces; it does not grow its own variant of any of them.
package actuate

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// DefaultAPITimeout bounds one Kubernetes API call of an actuator.
const DefaultAPITimeout = 10 * time.Second

// DefaultServerRequestTimeout is the API server's default --request-timeout.
// Its timeout filter answers 504 at that point but lets the handler run on,
// and the handler's etcd transaction (bounded by the request's deadline, the
// same timeout) can still commit until then: a write whose answer was lost
// may land up to this long after the server received it. The actors take it
// from kube.serverRequestTimeout.
const DefaultServerRequestTimeout = 60 * time.Second

// Outcome tells the controller what to do with an object's key after the
// actuator handled a decision on it. It is the first result of every
// actuator method, `func(ctx, object, decision) (Outcome, error)`:
//
//   - Outcome{} and nil: done; the key's failure history is forgotten.
//   - RequeueAfter > 0: not now (the rate window is full, the object is not
//     due yet); look again then.
//   - Retry: look again with the queue's per-item backoff, without a failure
//     (the object changed under the write, the mirror is behind).
//   - a non-nil error: the action failed; the controller logs it and retries
//     with backoff (Retry is implied).
//
// The audit of a decision is never a reason to fail or retry: the Auditor
// keeps the message until it is stored.
type Outcome struct {
	RequeueAfter time.Duration
	Retry        bool
}

// Requeue applies the contract of Outcome to a rate-limited workqueue, after
// the worker handled key. The caller still calls Done.
func Requeue[T comparable](q workqueue.TypedRateLimitingInterface[T], key T, out Outcome, err error) {
	switch {
	case err != nil || out.Retry:
		q.AddRateLimited(key)
	case out.RequeueAfter > 0:
		q.Forget(key)
		q.AddAfter(key, out.RequeueAfter)
	default:
		q.Forget(key)
	}
}

// Call runs one API call with its own deadline (DefaultAPITimeout when
// timeout is not positive). Every call of an actuator gets one: a hung API
// server then fails a single call, which the controller retries with backoff,
// instead of holding the worker until leadership ends.
func Call[T any](ctx context.Context, timeout time.Duration, call func(ctx context.Context) (T, error)) (T, error) {
	if timeout <= 0 {
		timeout = DefaultAPITimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return call(cctx)
}

// Package cleanup is the cleanup actor: it deletes Failed pods left behind
// (Evicted and other configured reasons) and force-deletes pods stuck in
// Terminating, which neither the descheduler (eviction only, never Terminating
// pods) nor the pod garbage collector (only above 12,500 terminated pods) does.
//
// Why it is shaped this way:
//   - State comes from the KUBE mirror (kubestate), never from a LIST or WATCH,
//     so API load does not grow with replicas; mirror changes and a reconcile
//     tick enqueue pod keys into one client-go workqueue.
//   - What to do with a pod is a pure function of its state (Policy.Decide),
//     so the decision table is unit-tested without clients, and the same
//     function re-checks the live pod before any write.
//   - A stuck Terminating pod receives no further updates, so the time it
//     becomes due is scheduled with the delaying queue (AddAfter) instead of
//     waiting for the next tick.
//   - Every write goes through the Actuator: dry-run, a sliding-window cap on
//     deletions, a live GET with UID check and re-decision, deletes with UID
//     and resourceVersion preconditions, a Kubernetes Event, an OPS audit
//     event with an idempotent id, and metrics.
package cleanup

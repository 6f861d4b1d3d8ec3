// Package cordon is opswire's cordon actor: it cordons (or taints) a node
// whose count of non-terminated pods reaches a high-water mark and lifts
// exactly what it did once the count falls to a low-water mark.
//
// Why it is shaped this way:
//
//   - The decision is a pure function of one node's state (Evaluate) plus a
//     fleet-wide blast-radius check (Admit), so the whole rule set is
//     table-tested without a cluster, and a replayed or stale message can only
//     ever lead to the same decision the current state leads to.
//   - State comes from the watcher's KUBE mirror (kubestate), never from a
//     LIST/WATCH of the API server: adding replicas adds no API load.
//   - Every write passes through one Actuator, which applies dry-run, the
//     rate limit and the blast-radius cap, re-reads the node and recounts
//     its pods from the API right before writing, writes with a
//     resourceVersion precondition (a concurrent change makes the write fail
//     instead of being overwritten), and then records a Kubernetes Event and
//     an OPS audit message with an idempotent id.
//   - opswire owns only what carries its label (node.kubernetes.io/autocordon);
//     a cordon or taint set by a person is never undone.
package cordon

// Package harness runs opswire end to end against real parts: a real
// kube-apiserver and etcd (built from the Go module proxy by
// hack/build-controlplane.sh and cached in ~/.cache/opswire/bin), a real nats-server with
// JetStream (embedded, listening on loopback TCP), and the service binaries as
// separate processes. Everything listens on loopback ports picked outside the
// kernel's ephemeral range (shared/testport says why), lives in temporary
// directories and is torn down by t.Cleanup, even when a test fails.
//
// There is no kubelet: tests write pod and node status themselves.
package harness

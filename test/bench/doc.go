//go:build bench

// Package bench holds the benchmarks of issue 8 that need real parts: the
// reaction-time and API-load run on a real kube-apiserver + etcd + NATS with
// the service binaries as processes, the actor-rebuild run on a real
// nats-server, and the notifier burst against the Feishu-compatible server.
//
// They are gated behind the "bench" build tag so `make test` never runs them
// (a run takes minutes and loads the machine); `make bench` (hack/bench.sh)
// runs them with -tags bench -benchtime 1x. Each benchmark runs its scenario
// once and reports its figures with b.ReportMetric; bench/table turns the
// output into docs/benchmarks.md. Every figure is measured beside a floor
// taken in the same run, because shared machines are noisy.
package bench

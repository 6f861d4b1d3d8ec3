package watcher

// Benchmarks of issue 8, figure 2: watcher throughput, memory and churn
// suppression at 150,000 pods on 5,000 nodes, driven by the synthetic
// informer source. Each runs its scenario once (use -benchtime=1x) and
// reports its figures with b.ReportMetric; hack/bench.sh turns them into
// docs/benchmarks.md.

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/services/watcher/internal/compact"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// BenchmarkWatcherThroughput150k measures, against a real embedded
// nats-server with the production KUBE stream:
//   - initial-msgs/s: the first publication of 155,000 objects;
//   - updates/s: 150,000 pod updates that change the compact state (a restart)
//     turned into stored messages;
//   - floor-msgs/s: raw JetStream async publish of 150,000 messages of the same
//     subjects, headers and sizes, prebuilt, same connection settings;
//   - churn-suppressed-%: share of 150,000 status-only updates (new
//     resourceVersion and probe times, same compact state) not republished.
func BenchmarkWatcherThroughput150k(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := natstest.Start(b)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	def := config.Default()
	// The same JetStream settings as the service (run.go).
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(def.Watcher.PublishTimeout.Duration), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	if err := natsx.EnsureStreams(ctx, js, def.NATS); err != nil {
		b.Fatal(err)
	}

	src := newSource()
	pods, nodes := scaleInformers(src, scalePods, scaleNodes, true)
	w, err := New(pods, nodes, js, Options{Cluster: "bench", Workers: def.Watcher.Workers, TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		b.Fatal("caches did not sync")
	}
	published := func(kind string) float64 { return testutil.ToFloat64(w.m.published.WithLabelValues(kind, "upsert")) }
	unchanged := func() float64 { return testutil.ToFloat64(w.m.unchanged.WithLabelValues("pod")) }

	b.ResetTimer()
	start := time.Now()
	go func() { _ = w.Run(ctx, nil) }()
	testkit.Eventually(b, 5*time.Minute, "initial publication", func() bool {
		return published("pod") == scalePods && published("node") == scaleNodes
	})
	b.ReportMetric(float64(scalePods+scaleNodes)/time.Since(start).Seconds(), "initial-msgs/s")

	base := realisticPod(0, "1")
	// Real changes: every pod restarts once.
	before := published("pod")
	start = time.Now()
	go func() {
		for i := range scalePods {
			src.podW.Modify(variant(base, i, src.nextRV(), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = append([]corev1.ContainerStatus(nil), p.Status.ContainerStatuses...)
				p.Status.ContainerStatuses[0].RestartCount = 1
			}))
		}
	}()
	testkit.Eventually(b, 5*time.Minute, "updates stored", func() bool { return published("pod")-before == scalePods })
	updateRate := float64(scalePods) / time.Since(start).Seconds()
	b.ReportMetric(updateRate, "updates/s")

	// Status-only churn: a kubelet heartbeat rewrites probe times.
	beforePub, beforeSkip := published("pod"), unchanged()
	probe := metav1.NewTime(time.Now())
	start = time.Now()
	go func() {
		for i := range scalePods {
			src.podW.Modify(variant(base, i, src.nextRV(), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = append([]corev1.ContainerStatus(nil), p.Status.ContainerStatuses...)
				p.Status.ContainerStatuses[0].RestartCount = 1
				p.Status.Conditions = append([]corev1.PodCondition(nil), p.Status.Conditions...)
				for c := range p.Status.Conditions {
					p.Status.Conditions[c].LastProbeTime = probe
				}
			}))
		}
	}()
	testkit.Eventually(b, 5*time.Minute, "heartbeats processed", func() bool {
		return published("pod")-beforePub+unchanged()-beforeSkip == scalePods
	})
	b.ReportMetric(float64(scalePods)/time.Since(start).Seconds(), "heartbeats/s")
	b.ReportMetric(100*(unchanged()-beforeSkip)/scalePods, "churn-suppressed-%")
	b.StopTimer()

	// Floor: the same messages, prebuilt, published raw.
	msgs := make([]*nats.Msg, scalePods)
	for i := range msgs {
		p := variant(base, i, src.nextRV(), func(p *corev1.Pod) {
			p.Status.ContainerStatuses = append([]corev1.ContainerStatus(nil), p.Status.ContainerStatuses...)
			p.Status.ContainerStatuses[0].RestartCount = 2
		})
		state := compact.PodState(p, 256)
		ev, err := envelope.New("pod/"+state.UID+"/"+state.ResourceVersion, envelope.Source("bench", "watcher"), events.TypePod,
			p.Namespace+"/"+p.Name, state, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = ev.Msg(subject.Pod("bench", p.Namespace, p.Name))
	}
	b.StartTimer()
	start = time.Now()
	for _, m := range msgs {
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		b.Fatal("floor publishes not acknowledged")
	}
	floor := float64(scalePods) / time.Since(start).Seconds()
	b.ReportMetric(floor, "floor-msgs/s")
	b.ReportMetric(updateRate/floor, "x-floor")
	// Publishes refused by the client (too many pending) are retried with backoff.
	b.ReportMetric(testutil.ToFloat64(w.m.errors.WithLabelValues("pod")), "publish-retries")
}

// BenchmarkWatcherHeap150k is the watcher's steady-state heap per pod: the
// compacting informer caches (pods, nodes, the by-node index) plus the
// watcher's record of what it stored, after publishing everything. The
// publisher acknowledges at once, so the NATS client's and server's buffers
// are not counted.
func BenchmarkWatcherHeap150k(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	baseline := heapAlloc()
	src := newSource()
	pods, nodes := scaleInformers(src, scalePods, scaleNodes, true)
	w, err := New(pods, nodes, ackedPublisher{}, Options{Cluster: "bench", Workers: 4, TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		b.Fatal("caches did not sync")
	}
	go func() { _ = w.Run(ctx, nil) }()
	testkit.Eventually(b, 5*time.Minute, "everything recorded", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.published.len() == scalePods+scaleNodes
	})
	used := heapAlloc() - baseline
	b.ReportMetric(float64(used)/scalePods, "heap-B/pod")
	b.ReportMetric(float64(used)/(1<<20), "heap-MiB")
	writeHeapProfile(b)
	runtime.KeepAlive(w)
}

// BenchmarkInformerHeap150k is the floor of the heap figure: a plain
// client-go informer holding the same 150,000 pods and 5,000 nodes untransformed.
func BenchmarkInformerHeap150k(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	baseline := heapAlloc()
	src := newSource()
	pods, nodes := scaleInformers(src, scalePods, scaleNodes, false)
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		b.Fatal("caches did not sync")
	}
	if n := len(pods.GetStore().ListKeys()); n != scalePods {
		b.Fatalf("informer holds %d pods", n)
	}
	used := heapAlloc() - baseline
	b.ReportMetric(float64(used)/scalePods, "heap-B/pod")
	b.ReportMetric(float64(used)/(1<<20), "heap-MiB")
	runtime.KeepAlive(pods)
	runtime.KeepAlive(nodes)
}

// variant is pod i as a watch event delivers it: a shallow copy of a decoded
// pod with its own identity, changed by mutate (which must copy what it edits).
func variant(base *corev1.Pod, i int, rv string, mutate func(*corev1.Pod)) *corev1.Pod {
	ref := realisticIdentity(i)
	p := *base
	p.Namespace, p.Name, p.UID, p.ResourceVersion = ref.Namespace, ref.Name, ref.UID, rv
	p.Spec.NodeName = ref.Spec.NodeName
	mutate(&p)
	return &p
}

// realisticIdentity is the name, namespace, uid and node of pod i, as realisticPod assigns them.
func realisticIdentity(i int) *corev1.Pod {
	p := &corev1.Pod{}
	p.Namespace, p.Name, p.UID = podIdentity(i)
	p.Spec.NodeName = benchNodeName(i % scaleNodes)
	return p
}

// writeHeapProfile writes what is live now to $OPSWIRE_BENCH_HEAPPROFILE, if
// set: hack/bench.sh uses it to show where the watcher's heap goes.
func writeHeapProfile(b *testing.B) {
	path := os.Getenv("OPSWIRE_BENCH_HEAPPROFILE")
	if path == "" {
		return
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

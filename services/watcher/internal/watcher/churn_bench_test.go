package watcher

// The long benchmark of issue 18 (target 5): the watcher under sustained
// churn at 150,000 pods.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
	"github.com/opswire/opswire/shared/testport"
)

// Churn of BenchmarkWatcherChurn150k: pod updates per second, and how long
// (OPSWIRE_BENCH_CHURN_DURATION, a Go duration, shortens it for trial runs).
const (
	churnRate            = 1000
	churnDefaultDuration = 10 * time.Minute
	// Lags are counted in buckets of churnLagBucket up to churnLagBuckets of
	// them (longer ones in the last), so measuring allocates nothing.
	churnLagBucket  = 100 * time.Microsecond
	churnLagBuckets = 100_000
	// churnStallTick is the sleep of the stall probe.
	churnStallTick = 5 * time.Millisecond
)

// processStart and debugStalls: see OPSWIRE_BENCH_CHURN_DEBUG.
var (
	processStart = time.Now()
	debugStalls  = os.Getenv("OPSWIRE_BENCH_CHURN_DEBUG") != ""
)

// churnResync is the informers' resync period: the service's
// (informerResync), unless OPSWIRE_BENCH_CHURN_RESYNC (a Go duration) sets
// another to show what a periodic resync of 150,000 pods costs the lag.
func churnResync(b *testing.B) time.Duration {
	v := os.Getenv("OPSWIRE_BENCH_CHURN_RESYNC")
	if v == "" {
		return informerResync
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("OPSWIRE_BENCH_CHURN_RESYNC=%q: want a Go duration such as 30s", v)
	}
	return d
}

func churnDuration(b *testing.B) time.Duration {
	v := os.Getenv("OPSWIRE_BENCH_CHURN_DURATION")
	if v == "" {
		return churnDefaultDuration
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		b.Fatalf("OPSWIRE_BENCH_CHURN_DURATION=%q: want a positive Go duration such as 1m", v)
	}
	return d
}

// BenchmarkWatcherChurn150k is the long row: after the first publication of
// 150,000 pods and 5,000 nodes, 1,000 pod updates per second that change the
// compact state (a container restart, round robin over the pods) for 10
// minutes, against a nats-server process with the production KUBE stream
// and the service's JetStream settings. It reports:
//   - lag-p50-ms / lag-p99-ms / lag-max-ms: from the watch event entering
//     the informer to the message stored in KUBE, as an ordered consumer on
//     KUBE receives it (matched by the resourceVersion in its Nats-Msg-Id);
//   - heap-start-MiB / heap-end-MiB: the process's live heap (after two GCs)
//     when the churn starts and when it ends (the nats-server is a process of
//     its own here), and heap-growth-%;
//   - depth-max and depth-end: the watcher's queue (objects waiting to be
//     compared and published) plus its publishes awaiting an ack, sampled
//     every second, at most and in the last sample;
//   - churn-updates/s: the rate actually sent, and missing: updates not
//     stored within 30 s of the last one;
//   - stall-max-ms: the floor of the lag, the longest this process could
//     not run at all (a 5 ms sleep that overslept: the machine's other
//     processes, or the GC), and send-late-max-ms: how late the sender ran
//     behind its schedule (lags count from the actual send); ping-max-ms:
//     the floor with the nats-server process in it, the longest PING → PONG
//     round trip to it (one every 10 ms);
//   - cpu-us/update, alloc-B/update, gc-cycles: this process's CPU (kernel
//     accounting) and allocation per update during the churn, watcher,
//     synthetic source and KUBE consumer together.
//
// The informers resync as the service's do (informerResync: never);
// OPSWIRE_BENCH_CHURN_RESYNC sets another period to measure what one costs.
// OPSWIRE_BENCH_CHURN_CPUPROFILE profiles the churn alone, and
// OPSWIRE_BENCH_CHURN_DEBUG=1 logs every stall over 100 ms (seconds since the
// process started, as GODEBUG=gctrace=1 prints them).
func BenchmarkWatcherChurn150k(b *testing.B) {
	duration := churnDuration(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The nats-server runs as its own process (as in production), so the
	// heap measured is the watcher's: KUBE's 10-minute duplicate window alone
	// holds ~600,000 message ids by the end of the run, which an embedded
	// server would add to it.
	nc, err := nats.Connect(startNATSProcess(b))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	def := config.Default()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(def.Watcher.PublishTimeout.Duration), jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	if err := natsx.EnsureStreams(ctx, js, def.NATS); err != nil {
		b.Fatal(err)
	}
	src := newSource()
	pods, nodes := scaleInformersResync(src, scalePods, scaleNodes, true, churnResync(b))
	w, err := New(pods, nodes, js, Options{Cluster: "bench", Workers: def.Watcher.Workers, TombstoneTTL: time.Hour}, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	go pods.Run(ctx.Done())
	go nodes.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		b.Fatal("caches did not sync")
	}
	published := func() float64 { return testutil.ToFloat64(w.m.published.WithLabelValues("pod", "upsert")) }
	go func() { _ = w.Run(ctx, nil) }()
	testkit.Eventually(b, 10*time.Minute, "initial publication", func() bool {
		return published() == scalePods && testutil.ToFloat64(w.m.published.WithLabelValues("node", "upsert")) == scaleNodes
	})

	// Everything the measurement needs is allocated before the first heap
	// reading: the send time of every update, indexed by its resourceVersion
	// from rvBase, and the lag histogram.
	total := int(duration.Seconds() * churnRate)
	sentAt := make([]atomic.Int64, total)
	var lags [churnLagBuckets]atomic.Int64
	var stored atomic.Int64
	rvBase := atomicRV(src)
	cons, err := js.OrderedConsumer(ctx, subject.KubeStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"kube.bench.pod.>"}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now().UnixNano()
		id := m.Headers().Get(nats.MsgIdHdr)
		rv, err := strconv.ParseInt(id[strings.LastIndexByte(id, '/')+1:], 10, 64)
		if err != nil {
			return
		}
		i := int(rv - rvBase - 1)
		if i < 0 || i >= total {
			return
		}
		bucket := max(0, (now-sentAt[i].Load())/int64(churnLagBucket))
		lags[min(bucket, churnLagBuckets-1)].Add(1)
		stored.Add(1)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()

	heapStart := heapAlloc()
	writeChurnHeapProfile(b, "start")
	var depthMax, depthLast atomic.Int64
	var heapSeries []string
	var seriesMu sync.Mutex
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			d := int64(w.queue().Len()) + int64(js.PublishAsyncPending())
			depthLast.Store(d)
			if d > depthMax.Load() {
				depthMax.Store(d)
			}
			if n%60 == 0 {
				rtmetrics.Read(sample)
				seriesMu.Lock()
				heapSeries = append(heapSeries, fmt.Sprintf("%.0f", float64(sample[0].Value.Uint64())/(1<<20)))
				seriesMu.Unlock()
			}
		}
	}()

	// The floor of the lag: how long this process could not run at all (a
	// short sleep that overslept: other processes on the machine, or the
	// GC). A lag that long is the machine's, not the watcher's.
	var stallMax, stalls atomic.Int64
	go func() {
		for ctx.Err() == nil {
			t0 := time.Now()
			time.Sleep(churnStallTick)
			over := int64(time.Since(t0) - churnStallTick)
			if over > int64(100*time.Millisecond) {
				stalls.Add(1)
				if debugStalls {
					fmt.Fprintf(os.Stderr, "stall %v at %.3fs\n", time.Duration(over), time.Since(processStart).Seconds())
				}
			}
			if over > stallMax.Load() {
				stallMax.Store(over)
			}
		}
	}()
	// And the floor with the nats-server in it (a process apart, starved on
	// a loaded machine as much): the longest PING → PONG round trip to it,
	// one every 10 ms on a connection of its own.
	var pingMax atomic.Int64
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		pc, err := nats.Connect(nc.ConnectedUrl())
		if err != nil {
			return
		}
		defer pc.Close()
		for ctx.Err() == nil {
			t0 := time.Now()
			if err := pc.Flush(); err == nil {
				if d := int64(time.Since(t0)); d > pingMax.Load() {
					pingMax.Store(d)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	base := realisticPod(0, "1")
	stopCPUProfile := startChurnCPUProfile(b)
	usageStart := readChurnUsage()
	b.ResetTimer()
	start := time.Now()
	var lateMax time.Duration
	for sent := 0; sent < total; {
		// Paced by the clock: whatever is due is sent now, so a slow tick
		// does not lower the rate. Lags count from the actual send (when
		// the event reaches the informer, as a watch event would); how late
		// the sender itself ran (starved of CPU) is reported apart.
		due := min(total, int(time.Since(start).Seconds()*churnRate)+1)
		for ; sent < due; sent++ {
			restarts := int32(sent/scalePods + 1)
			rv := src.nextRV()
			n, _ := strconv.ParseInt(rv, 10, 64)
			now := time.Now()
			if i := int(n - rvBase - 1); i >= 0 && i < total {
				sentAt[i].Store(now.UnixNano())
			}
			lateMax = max(lateMax, now.Sub(start.Add(time.Duration(sent)*time.Second/churnRate)))
			src.podW.Modify(variant(base, sent%scalePods, rv, func(p *corev1.Pod) {
				p.Status.ContainerStatuses = append([]corev1.ContainerStatus(nil), p.Status.ContainerStatuses...)
				p.Status.ContainerStatuses[0].RestartCount = restarts
			}))
		}
		time.Sleep(5 * time.Millisecond)
	}
	sending := time.Since(start)
	testkit.Eventually(b, 30*time.Second, "every update stored", func() bool { return stored.Load() >= int64(total) })
	b.StopTimer()
	usage := readChurnUsage().since(usageStart)
	stopCPUProfile()
	stall, ping := time.Duration(stallMax.Load()), time.Duration(pingMax.Load())
	heapEnd := heapAlloc()
	writeChurnHeapProfile(b, "end")
	cancel()
	<-sampleDone
	<-pingDone

	var counted int64
	quantile := func(q float64) float64 {
		rank := int64(q*float64(counted)+0.999999) - 1
		var seen int64
		for i := range lags {
			seen += lags[i].Load()
			if seen > rank {
				return float64(i) * churnLagBucket.Seconds() * 1000
			}
		}
		return churnLagBuckets * churnLagBucket.Seconds() * 1000
	}
	for i := range lags {
		counted += lags[i].Load()
	}
	maxLag := 0.0
	for i := len(lags) - 1; i >= 0; i-- {
		if lags[i].Load() > 0 {
			maxLag = float64(i) * churnLagBucket.Seconds() * 1000
			break
		}
	}
	b.ReportMetric(duration.Minutes(), "churn-minutes")
	b.ReportMetric(float64(total)/sending.Seconds(), "churn-updates/s")
	b.ReportMetric(quantile(0.5), "lag-p50-ms")
	b.ReportMetric(quantile(0.99), "lag-p99-ms")
	b.ReportMetric(maxLag, "lag-max-ms")
	b.ReportMetric(float64(heapStart)/(1<<20), "heap-start-MiB")
	b.ReportMetric(float64(heapEnd)/(1<<20), "heap-end-MiB")
	b.ReportMetric(100*(float64(heapEnd)-float64(heapStart))/float64(heapStart), "heap-growth-%")
	b.ReportMetric(float64(depthMax.Load()), "depth-max")
	b.ReportMetric(float64(depthLast.Load()), "depth-end")
	b.ReportMetric(float64(int64(total)-stored.Load()), "missing")
	b.ReportMetric(lateMax.Seconds()*1000, "send-late-max-ms")
	b.ReportMetric(stall.Seconds()*1000, "stall-max-ms")
	b.ReportMetric(ping.Seconds()*1000, "ping-max-ms")
	b.ReportMetric(usage.cpu.Seconds()*1e6/float64(total), "cpu-us/update")
	b.ReportMetric(float64(usage.allocs)/float64(total), "alloc-B/update")
	b.ReportMetric(float64(usage.gcs), "gc-cycles")
	b.Logf("churn: %d pod updates in %v (%.0f/s) at %d pods; lag p50 %.1f ms, p99 %.1f ms, max %.1f ms; heap %.0f MiB at the start, %.0f MiB at the end, "+
		"live heap each minute (MiB): [%s]; queue + unacked publishes at most %d, %d in the last sample; "+
		"this process (watcher, source and KUBE consumer) used %.1f µs CPU and allocated %.0f B per update, %d GC cycles; "+
		"the sender ran at most %v late; the process could not run for up to %v (%d times over 100 ms); a PING to the nats-server took up to %v",
		total, sending.Round(time.Millisecond), float64(total)/sending.Seconds(), scalePods, quantile(0.5), quantile(0.99), maxLag,
		float64(heapStart)/(1<<20), float64(heapEnd)/(1<<20), strings.Join(heapSeries, " "), depthMax.Load(), depthLast.Load(),
		usage.cpu.Seconds()*1e6/float64(total), float64(usage.allocs)/float64(total), usage.gcs,
		lateMax.Round(time.Millisecond), stall.Round(time.Millisecond), stalls.Load(), ping.Round(time.Millisecond))
}

// churnUsage is what this process has used so far: CPU (user + system, from
// the kernel), bytes allocated and GC cycles. (The runtime's own CPU
// estimates count wall time on its Ps, which overstates them on a loaded
// machine: the GC's share is read from the CPU profile instead.)
type churnUsage struct {
	cpu    time.Duration
	allocs uint64
	gcs    uint64
}

func readChurnUsage() churnUsage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	rtmetrics.Read(s)
	return churnUsage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), allocs: s[0].Value.Uint64(), gcs: s[1].Value.Uint64()}
}

func (u churnUsage) since(start churnUsage) churnUsage {
	return churnUsage{cpu: u.cpu - start.cpu, allocs: u.allocs - start.allocs, gcs: u.gcs - start.gcs}
}

// startChurnCPUProfile profiles the churn alone (not the initial list and
// publication) into $OPSWIRE_BENCH_CHURN_CPUPROFILE, if set; the returned
// func stops it.
func startChurnCPUProfile(b *testing.B) func() {
	path := os.Getenv("OPSWIRE_BENCH_CHURN_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// writeChurnHeapProfile writes what is live now to
// $OPSWIRE_BENCH_CHURN_HEAPPROFILE-<when>.pprof, if set (hack/bench.sh
// compares the end with the start: go tool pprof -diff_base).
func writeChurnHeapProfile(b *testing.B, when string) {
	prefix := os.Getenv("OPSWIRE_BENCH_CHURN_HEAPPROFILE")
	if prefix == "" {
		return
	}
	f, err := os.Create(prefix + "-" + when + ".pprof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// startNATSProcess starts the cached nats-server binary (make controlplane:
// $OPSWIRE_BIN_DIR, else opswire/bin in the user's cache directory) with JetStream on a
// free port and returns its URL; it is killed at the end of the benchmark.
func startNATSProcess(b *testing.B) string {
	b.Helper()
	dir := os.Getenv("OPSWIRE_BIN_DIR")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			b.Fatal(err)
		}
		dir = filepath.Join(c, "opswire", "bin")
	}
	bins, _ := filepath.Glob(filepath.Join(dir, "nats-server-v*"))
	if len(bins) == 0 {
		b.Fatalf("no nats-server binary in %s: run `make controlplane` first", dir)
	}
	port := testport.Must(b)
	cmd := exec.Command(bins[len(bins)-1], "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", b.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	testkit.Eventually(b, 30*time.Second, "nats-server up", func() bool {
		nc, err := nats.Connect(url)
		if err != nil {
			return false
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = js.AccountInfo(ctx)
		return err == nil
	})
	return url
}

// atomicRV is the source's current resourceVersion counter.
func atomicRV(s *source) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.rv)
}

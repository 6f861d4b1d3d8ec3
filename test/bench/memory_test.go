//go:build bench

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/test/harness"
)

// memoryConfig: every actor on, in dry-run (nothing in the synthetic KUBE
// exists in the API server, which only holds the Leases), one replica each.
const memoryConfig = `
cluster:
  name: bench
controller:
  LeaderElect: true
  leaseLockNamespace: default
autoCordon:
  enable: true
delException:
  enable: true
notifier:
  receivers:
  - name: ops-feishu
    urlEnv: BENCH_FEISHU_URL
    secretEnv: BENCH_FEISHU_SECRET
  routes:
  - subjects: ['ops.*.>']
    receivers: [ops-feishu]
`

// memoryService is one process of the memory figure and how many KUBE
// messages its mirror must have applied before it is measured.
type memoryService struct {
	name string
	kube int // KUBE messages its mirror reads (0: it reads none)
	pods bool
}

// BenchmarkServiceMemory150k is figure 7: the resident memory and heap of
// every service binary, as processes, once each holds the state of 150,000
// pods and 5,000 nodes: the actors read the synthetic KUBE of figure 3 (one
// version of each object), the watcher lists and watches a synthetic API
// server (fakeAPI) and has stored every object in a KUBE of its own. RSS is VmRSS and VmHWM (peak) from /proc; heap is
// go_memstats_heap_inuse_bytes from /metrics right after a GC forced
// through /debug/pprof/heap?gc=1 (the service runs with --pprof), whose
// profile is kept (OPSWIRE_BENCH_PROFILE_DIR) to show where the heap goes.
// Heap per pod is the whole heap divided by the pods mirrored (a ceiling:
// the process's own baseline is in it).
func BenchmarkServiceMemory150k(b *testing.B) {
	services := []memoryService{
		{name: "watcher", pods: true},
		{name: "cordon", kube: rebuildNodes},
		{name: "cleanup", kube: rebuildPods + rebuildNodes, pods: true},
		{name: "report", kube: rebuildPods + rebuildNodes, pods: true},
		{name: "notifier"},
	}
	for _, s := range services {
		harness.Build(b, s.name)
	}
	cp := harness.StartControlPlane(b)
	n := harness.StartNATS(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := natsx.EnsureStreams(ctx, n.JS, config.Default().NATS); err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(n.Conn, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	fillKube(b, js, 0)
	feishu := feishutest.NewServer()
	b.Cleanup(feishu.Close)
	secret := "bench-secret-7c2d"
	url := feishu.AddBot("bench-memory-bot", feishutest.Bot{Secret: secret})
	cfg := harness.WriteConfig(b, memoryConfig)
	// The watcher lists and watches a synthetic API server of 150,000
	// realistic pods and 5,000 nodes, and publishes to a KUBE of its own
	// (the actors' KUBE must not change under them).
	api, apiSrv := startFakeAPI(b, rebuildPods, rebuildNodes)
	watcherNATS := harness.StartNATS(b)

	b.ResetTimer()
	procs := map[string]*harness.Process{}
	for _, s := range services {
		o := harness.ServiceOptions{Config: cfg, NATSURL: n.URL, Args: []string{"--pprof"},
			// Each service runs as in a container limited to the target's
			// 300 MiB (deploy/ passes the container's limit the same way).
			Env: []string{"BENCH_FEISHU_URL=" + url, "BENCH_FEISHU_SECRET=" + secret, app.MemoryLimitEnv + "=300Mi"}}
		switch s.name {
		case "watcher":
			o.Kubeconfig, o.NATSURL = api.kubeconfig(b, apiSrv.URL), watcherNATS.URL
		case "notifier":
		default:
			o.Kubeconfig = cp.Kubeconfig
			o.Args = append(o.Args, "--dry-run")
		}
		procs[s.name] = harness.StartService(b, s.name, o)
	}
	for _, s := range services {
		p := procs[s.name]
		p.WaitReady(b, 5*time.Minute)
		if s.name == "watcher" {
			harness.Eventually(b, 10*time.Minute, "the watcher stores every object", func() bool {
				return kubeMsgs(watcherNATS.JS) >= rebuildPods+rebuildNodes
			})
			continue
		}
		if s.kube == 0 {
			continue
		}
		harness.Eventually(b, 5*time.Minute, s.name+" mirrors KUBE", func() bool {
			return p.Metric("opswire_kube_mirror_synced") == 1 && p.Metric("opswire_kube_messages_received_total") >= float64(s.kube)
		})
	}
	b.StopTimer()
	for _, s := range services {
		m := measureProcess(b, procs[s.name], s.name)
		b.ReportMetric(m.rss, s.name+"-rss-MiB")
		b.ReportMetric(m.hwm, s.name+"-peak-rss-MiB")
		b.ReportMetric(m.heap/(1<<20), s.name+"-heap-MiB")
		if s.pods {
			b.ReportMetric(m.heap/rebuildPods, s.name+"-heap-B/pod")
		}
		b.Logf("%s: RSS %.1f MiB (peak %.1f MiB), heap in use after GC %.1f MiB", s.name, m.rss, m.hwm, m.heap/(1<<20))
	}
}

type processMemory struct {
	rss, hwm float64 // MiB
	heap     float64 // bytes
}

// measureProcess forces a GC in the process (through its heap profile, kept
// when OPSWIRE_BENCH_PROFILE_DIR is set), then reads its heap and RSS.
func measureProcess(b *testing.B, p *harness.Process, name string) processMemory {
	b.Helper()
	resp, err := http.Get(p.HealthURL + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatal(err)
	}
	prof, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("%s heap profile: %d %v", name, resp.StatusCode, err)
	}
	if dir := os.Getenv("OPSWIRE_BENCH_PROFILE_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "memory-"+name+".pprof"), prof, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	heap := p.Metric("go_memstats_heap_inuse_bytes")
	if heap < 0 {
		b.Fatalf("%s: no go_memstats_heap_inuse_bytes", name)
	}
	status := procStatus(b, p.Pid())
	return processMemory{rss: status["VmRSS"] / 1024, hwm: status["VmHWM"] / 1024, heap: heap}
}

// procStatus reads the kB fields of /proc/<pid>/status.
func procStatus(b *testing.B, pid int) map[string]float64 {
	b.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if num, ok := strings.CutSuffix(strings.TrimSpace(v), " kB"); ok {
			if x, err := strconv.ParseFloat(num, 64); err == nil {
				out[k] = x
			}
		}
	}
	return out
}

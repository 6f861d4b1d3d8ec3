//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/test/harness"
)

// Scale and sample counts of the reaction run (issue 8, figure 1).
const (
	reactionNodes   = 50
	podsPerNode     = 100
	reactionSamples = 200
	sampleTimeout   = 15 * time.Second
	// apiserverProfileTime is how long the API server's CPU profile runs
	// from the start of the cordon phase, which takes about 10 s here.
	apiserverProfileTime = 6 * time.Second
	benchNamespace       = "bench"
)

// reactionConfig: a node is cordoned at 101 pods and released at 100; rate
// limits and caps are lifted so that they never delay a sample (they are
// measured in the actors' own tests, not here). That includes the client's
// own token bucket (kube.qps): one sample after another is a steady ~50
// requests/s per actor (cordon and uncordon, three requests and an Event
// each: two reads and the patch), which the default qps of 50 answers with
// a 20 ms wait per request.
const reactionConfig = `
cluster:
  name: bench
kube:
  qps: 1000
  burst: 2000
controller:
  LeaderElect: true
  leaseLockNamespace: default
autoCordon:
  enable: true
  maxPods: 101
  minPods: 100
  maxActionsPerMinute: 100000
  maxCordonedPercent: 100
delException:
  enable: true
  minAge: 0s
  maxDeletionsPerMinute: 100000
`

// BenchmarkReaction5000 is figures 1 and 4 on the real harness: kube-apiserver
// + etcd, nats-server, and opswire-watcher, -cordon and -cleanup as
// processes, 5,000 pods on 50 nodes. It measures, sample by sample:
//   - cordon: a pod created on a node at 100 pods (the write that makes the
//     node cross maxPods) → the node seen unschedulable through the API;
//   - uncordon: that pod force-deleted → the node seen schedulable again;
//   - cleanup: a running pod's status set to Failed/Evicted → the pod seen deleted;
//   - floor: the same writes → a plain client-go informer seeing the write itself.
//
// Then 4,800 pods restart once (16 parallel status writers): the rate at which
// the watcher stores the updates, against the informer seeing them (figure 2
// on a real API server).
//
// The actors reach the API through a counting proxy, which gives figure 4:
// requests per action by verb and resource, and every LIST and WATCH.
func BenchmarkReaction5000(b *testing.B) {
	for _, s := range []string{"watcher", "cordon", "cleanup"} {
		harness.Build(b, s) // compile outside the measured run
	}
	cp := harness.StartControlPlane(b)
	n := harness.StartNATS(b)
	counter := startAPICounter(b, cp)
	cfg := harness.WriteConfig(b, reactionConfig)
	c := cp.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	harness.CreateNamespace(b, c, benchNamespace)
	nodes := make([]string, reactionNodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%02d", i)
		// Nodes as kubelets fill them (50 images, conditions, addresses):
		// the cap's LIST of every node costs what it costs in a cluster.
		n := harness.RealSizeNode(nodes[i], harness.KubeletMaxImages)
		n.Labels["pool"] = "bench"
		harness.CreateRealSizeNode(b, c, n)
	}
	start := time.Now()
	createPods(b, c, reactionNodes*podsPerNode, func(i int) *corev1.Pod {
		return harness.Pod(benchNamespace, fmt.Sprintf("pod-%05d", i), nodes[i%reactionNodes])
	})
	b.Logf("created %d pods on %d nodes in %v", reactionNodes*podsPerNode, reactionNodes, time.Since(start).Round(time.Millisecond))

	// Figure 2, real API server: from the watcher's start (process, informer
	// sync, Lease) until KUBE holds every pod and node.
	start = time.Now()
	watcher := harness.StartService(b, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: counter.Kubeconfig(b, cp), NATSURL: n.URL})
	objects := reactionNodes*podsPerNode + reactionNodes
	harness.Eventually(b, 5*time.Minute, "KUBE holds the cluster", func() bool { return kubeMsgs(n.JS) >= objects })
	watcherRate := float64(objects) / time.Since(start).Seconds() // reported below: ResetTimer clears metrics
	watcher.WaitReady(b, time.Minute)

	obs := newObserver()
	obs.run(ctx, b, c)

	actorKubeconfig := counter.Kubeconfig(b, cp)
	var cordonProc, cleanupProc *harness.Process
	for _, s := range []string{"cordon", "cleanup"} {
		p := harness.StartService(b, s, harness.ServiceOptions{Config: cfg, Kubeconfig: actorKubeconfig, NATSURL: n.URL, ID: s + "-a"})
		if s == "cordon" {
			cordonProc = p
		} else {
			cleanupProc = p
		}
		p.WaitReady(b, time.Minute)
		harness.Eventually(b, time.Minute, s+" holds its Lease", func() bool { return harness.LeaseHolder(c, "default", "opswire-"+s) == s+"-a" })
	}

	b.ResetTimer()
	// The API server's CPU during the cordon phase (its first seconds: the
	// phase takes longer), for the profile section of benchmarks.md: where
	// the requests of a cordon spend the API server's time.
	apiClient, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		b.Fatal(err)
	}
	apiProfiled := fetchCPUProfile(b, apiClient, cp.URL, apiserverProfileTime, os.Getenv("OPSWIRE_BENCH_APISERVER_CPUPROFILE"))
	// Cordon and uncordon, one node at a time, round robin over the nodes.
	before, cachedBefore := counter.snapshot(), counter.snapshotCached()
	acceptedBefore, continuedBefore := counter.snapshotAccepted(), counter.snapshotContinued()
	var cordon, uncordon, floorAdd, floorDelete latencies
	var traced []sampleTrace
	timeouts := 0
	for i := range reactionSamples {
		node := nodes[i%reactionNodes]
		name := fmt.Sprintf("extra-%04d", i)
		added, cordoned := obs.expect("pod-add/"+benchNamespace+"/"+name), obs.expect("node-cordoned/"+node)
		t0 := time.Now()
		if _, err := c.CoreV1().Pods(benchNamespace).Create(ctx, harness.Pod(benchNamespace, name, node), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if d, ok := waitSince(t0, added); ok {
			floorAdd = append(floorAdd, d)
		}
		d, ok := waitSince(t0, cordoned)
		if !ok {
			timeouts++
			b.Logf("sample %d: %s not cordoned within %v", i, node, sampleTimeout)
		}
		cordon = append(cordon, d)
		traced = append(traced, sampleTrace{verb: "cordoned", node: node, t0: t0, seen: t0.Add(d), ok: ok})
		released, gone := obs.expect("node-uncordoned/"+node), obs.expect("pod-deleted/"+benchNamespace+"/"+name)
		zero := int64(0)
		t1 := time.Now()
		if err := c.CoreV1().Pods(benchNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			b.Fatal(err)
		}
		if d, ok := waitSince(t1, gone); ok {
			floorDelete = append(floorDelete, d)
		}
		if d, ok := waitSince(t1, released); ok {
			uncordon = append(uncordon, d)
			traced = append(traced, sampleTrace{verb: "uncordoned", node: node, t0: t1, seen: t1.Add(d), ok: true})
		} else if ok := nodeSchedulable(b, c, node); !ok {
			b.Fatalf("sample %d: %s still cordoned after %v", i, node, sampleTimeout)
		}
	}
	// The observer sees the last patch before the proxy has passed the
	// API server's answer back, and before the Event recorder has sent that
	// action's Event (it does so asynchronously): the counts are taken once
	// every request of opswire-cordon has been answered and every accepted
	// patch's Event has reached the proxy, so the window holds whole actions.
	// settled is that state for one actor: its requests in flight, and its
	// Event requests and accepted writes since a phase began.
	settled := func(agent string, write request, since, acceptedSince map[request]int) (inFlight, events, accepted int) {
		counts, answered, acc := counter.snapshot(), counter.snapshotAnswered(), counter.snapshotAccepted()
		for k, v := range counts {
			if k.Agent == agent && k.Verb != "WATCH" && k.Resource != "leases" {
				inFlight += v - answered[k]
			}
		}
		events = sum(delta(counts, since), func(r request) bool { return r.Agent == agent && r.Resource == "events" })
		return inFlight, events, delta(acc, acceptedSince)[write]
	}
	settle := func(phase, agent string, write request, since, acceptedSince map[request]int) {
		if !pollUntil(30*time.Second, func() bool { f, e, a := settled(agent, write, since, acceptedSince); return f == 0 && e >= a }) {
			f, e, a := settled(agent, write, since, acceptedSince)
			b.Logf("the %s phase did not settle within 30 s: %d requests in flight, %d Event requests for %d accepted writes", phase, f, e, a)
		}
	}
	<-apiProfiled
	settle("cordon", "opswire-cordon", request{"opswire-cordon", "PATCH", "nodes"}, before, acceptedBefore)
	afterCordon, cachedAfterCordon := counter.snapshot(), counter.snapshotCached()
	acceptedAfterCordon, continuedAfterCordon := counter.snapshotAccepted(), counter.snapshotContinued()
	logActorSteps(b, cordonProc.LogPath, traced)

	// Evicted pod → deleted, one pod at a time, 4 per node.
	var cleanup, floorStatus latencies
	for i := range reactionSamples {
		name := fmt.Sprintf("pod-%05d", i)
		pod, err := c.CoreV1().Pods(benchNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		failed, deleted := obs.expect("pod-failed/"+benchNamespace+"/"+name), obs.expect("pod-deleted/"+benchNamespace+"/"+name)
		pod.Status.Phase, pod.Status.Reason, pod.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		t0 := time.Now()
		if _, err := c.CoreV1().Pods(benchNamespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		if d, ok := waitSince(t0, failed); ok {
			floorStatus = append(floorStatus, d)
		}
		d, ok := waitSince(t0, deleted)
		if !ok {
			timeouts++
			b.Logf("sample %d: %s not deleted within %v", i, name, sampleTimeout)
		}
		cleanup = append(cleanup, d)
	}
	// The same for cleanup: each deletion's Event, sent asynchronously, is
	// counted in the phase it belongs to.
	settle("cleanup", "opswire-cleanup", request{"opswire-cleanup", "DELETE", "pods"}, afterCordon, acceptedAfterCordon)
	afterCleanup, acceptedAfterCleanup := counter.snapshot(), counter.snapshotAccepted()

	// Figure 2 on the real API server: every remaining pod's container
	// restarts once (a real change of its compact state), written by 16
	// parallel writers; the watcher's stored messages against the observer's
	// informer seeing the same updates.
	updated := podNames(reactionSamples, reactionNodes*podsPerNode)
	publishedBefore := watcher.Metric(`opswire_watcher_published_total{kind="pod",op="upsert"}`)
	obs.restarts.Store(0)
	t0 := time.Now()
	restartPods(b, c, obs, updated)
	written := time.Since(t0)
	harness.Eventually(b, 5*time.Minute, "the watcher to store every restart", func() bool {
		return watcher.Metric(`opswire_watcher_published_total{kind="pod",op="upsert"}`)-publishedBefore >= float64(len(updated))
	})
	watcherUpdates := time.Since(t0)
	harness.Eventually(b, time.Minute, "the observer to see every restart", func() bool { return obs.restarts.Load() >= int64(len(updated)) })
	observed := time.Unix(0, obs.lastRestart.Load()).Sub(t0)
	b.StopTimer()
	b.ReportMetric(float64(len(updated))/watcherUpdates.Seconds(), "watcher-real-updates/s")
	b.ReportMetric(float64(len(updated))/observed.Seconds(), "floor-real-updates/s")
	b.Logf("%d pod updates: written in %v, seen by a plain informer after %v, stored by the watcher after %v (upper bound: polled every 20 ms)",
		len(updated), written.Round(time.Millisecond), observed.Round(time.Millisecond), watcherUpdates.Round(time.Millisecond))

	floor := append(append(latencies(nil), floorAdd...), floorStatus...)
	for _, m := range []struct {
		name string
		l    latencies
	}{{"cordon", cordon}, {"uncordon", uncordon}, {"cleanup", cleanup}, {"floor", floor}, {"floor-create", floorAdd}, {"floor-status", floorStatus}, {"floor-delete", floorDelete}} {
		b.ReportMetric(m.l.quantile(0.5), m.name+"-p50-ms")
		b.ReportMetric(m.l.quantile(0.99), m.name+"-p99-ms")
		b.ReportMetric(float64(len(m.l)), m.name+"-samples")
	}
	b.ReportMetric(float64(timeouts), "timeouts")
	b.ReportMetric(watcherRate, "watcher-real-msgs/s")

	// Figure 4: requests per action, leases (leader election) apart.
	notLease := func(agent string) func(request) bool {
		return func(r request) bool { return r.Agent == agent && r.Resource != "leases" }
	}
	cordonPhase, cleanupPhase := delta(afterCordon, before), delta(afterCleanup, afterCordon)
	// Per action: the actions' own requests over the accepted patches; the
	// re-looks (decisions that read and wrote nothing) are figures apart.
	cost := cordonCostFrom(cordonPhase, delta(acceptedAfterCordon, acceptedBefore), delta(continuedAfterCordon, continuedBefore))
	b.ReportMetric(cost.PerAction(), "cordon-req/action")
	b.ReportMetric(float64(cost.Accepted), "cordon-actions")
	b.ReportMetric(float64(cost.Relooks()), "cordon-relooks")
	b.ReportMetric(cost.RelookRequests(), "cordon-relook-req")
	b.ReportMetric(cost.ReadsPerDecision(), "cordon-reads/decision")
	b.Logf("cordon phase cost: %s", cost)
	// Per deletion the API server accepted (a run that deleted fewer pods
	// must not look cheaper); none accepted: not measured.
	if deleted := delta(acceptedAfterCleanup, acceptedAfterCordon)[request{"opswire-cleanup", "DELETE", "pods"}]; deleted > 0 {
		b.ReportMetric(float64(sum(cleanupPhase, notLease("opswire-cleanup")))/float64(deleted), "cleanup-req/action")
		b.ReportMetric(float64(deleted), "cleanup-deletions")
	}
	// Which of cordon's reads the API server answered from its watch cache.
	cordonCached := delta(cachedAfterCordon, cachedBefore)
	isRead := func(r request) bool {
		return r.Agent == "opswire-cordon" && (r.Verb == "GET" || r.Verb == "LIST") && r.Resource != "leases"
	}
	reads, cachedReads := sum(cordonPhase, isRead), sum(cordonCached, isRead)
	b.ReportMetric(cost.ReadsPerDecision(), "cordon-reads/action")
	b.ReportMetric(float64(reads-cachedReads), "cordon-uncached-reads")
	// Go keeps the first 10 lines a benchmark logs: the lines below are few
	// and long.
	all := counter.snapshot()
	var whole []string
	for _, agent := range []string{"opswire-cordon", "opswire-cleanup", "opswire-watcher"} {
		short := strings.TrimPrefix(agent, "opswire-")
		b.ReportMetric(float64(sum(all, func(r request) bool { return r.Agent == agent && (r.Verb == "LIST" || r.Verb == "WATCH") })), short+"-list+watch")
		whole = append(whole, agent+": "+describe(all, agent))
	}
	b.Logf("API requests over the whole run: %s", strings.Join(whole, "; "))
	// opswire-cleanup reads pods and nodes only from the KUBE mirror; its one
	// LIST by design is the recovery's read of its own Events, once per
	// leadership term (first pages: a large list is paged).
	recoveryList := func(r request) bool {
		return r.Agent == "opswire-cleanup" && r.Verb == "LIST" && r.Resource == "events"
	}
	b.ReportMetric(float64(sum(all, func(r request) bool {
		return r.Agent == "opswire-cleanup" && (r.Verb == "LIST" || r.Verb == "WATCH") && !recoveryList(r)
	})), "cleanup-other-list+watch")
	b.ReportMetric(float64(sum(all, recoveryList)-sum(counter.snapshotContinued(), recoveryList)), "cleanup-events-lists")
	b.ReportMetric(float64(strings.Count(cleanupProc.Logs(), `"message":"became leader"`)), "cleanup-terms")
	var lat []string
	for _, r := range []request{{"opswire-cordon", "GET", "nodes"}, {"opswire-cordon", "LIST", "pods"}, {"opswire-cordon", "LIST", "nodes"}, {"opswire-cordon", "PATCH", "nodes"},
		{"opswire-cleanup", "GET", "pods"}, {"opswire-cleanup", "DELETE", "pods"}} {
		lat = append(lat, fmt.Sprintf("%s %s %s %.1f ms", strings.TrimPrefix(r.Agent, "opswire-"), r.Verb, r.Resource, float64(counter.meanLatency(r).Microseconds())/1000))
	}
	b.Logf("cordon phase (%d cordons + %d uncordons): %s; cleanup phase (%d deletions): %s; cordon requests during the cleanup phase (re-evaluation of nodes losing pods): %d; "+
		"mean API latency per request (through the proxy): %s", reactionSamples, reactionSamples, describeCached(cordonPhase, cordonCached, "opswire-cordon"),
		reactionSamples, describe(cleanupPhase, "opswire-cleanup"), sum(cleanupPhase, notLease("opswire-cordon")), strings.Join(lat, ", "))
	logBareRequests(b, actorKubeconfig, nodes, reactionSamples)
}

// pollUntil polls cond every 20 ms until it holds (true) or timeout passes (false).
func pollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// sampleTrace is one cordon or uncordon sample: the triggering write (t0)
// and the observer seeing its effect.
type sampleTrace struct {
	verb, node string
	t0, seen   time.Time
	ok         bool
}

// logActorSteps logs, from opswire-cordon's log, the p50 and p99 of the
// steps of its writes (the actuator's "node cordoned" and "node uncordoned"
// lines): the re-reads (node, pod recount and cap count at once), the
// intent's publish, the patch, and the whole action. Matched in order with
// the samples, it also splits each sample's reaction into the way in
// (trigger → the actuator starts: API, watcher, KUBE, mirror, queue), the
// actor, and the way out (the write's log line → the observer sees it).
func logActorSteps(b *testing.B, logPath string, samples []sampleTrace) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		b.Logf("cordon steps: cannot read the log: %v", err)
		return
	}
	steps := map[string]map[string]latencies{}
	type write struct {
		node      string
		at        time.Time
		took      time.Duration
		hasFields bool
	}
	writes := map[string][]write{}
	for _, line := range strings.Split(string(data), "\n") {
		var raw map[string]any
		if !strings.Contains(line, `"readMs"`) || json.Unmarshal([]byte(line), &raw) != nil {
			continue
		}
		verb, _ := raw["verb"].(string)
		if steps[verb] == nil {
			steps[verb] = map[string]latencies{}
		}
		for _, k := range []string{"readMs", "recountMs", "nodeReadMs", "intentMs", "patchMs", "tookMs"} {
			if v, ok := raw[k].(float64); ok {
				steps[verb][k] = append(steps[verb][k], time.Duration(v*float64(time.Millisecond)))
			}
		}
		w := write{}
		w.node, _ = raw["node"].(string)
		ts, _ := raw["time"].(string)
		at, errT := time.Parse(time.RFC3339Nano, ts)
		took, okT := raw["tookMs"].(float64)
		w.at, w.took, w.hasFields = at, time.Duration(took*float64(time.Millisecond)), errT == nil && okT
		writes[verb] = append(writes[verb], w)
	}
	for _, verb := range []string{"cordoned", "uncordoned"} {
		var parts []string
		for _, k := range []string{"readMs", "recountMs", "nodeReadMs", "intentMs", "patchMs", "tookMs"} {
			l := steps[verb][k]
			parts = append(parts, fmt.Sprintf("%s %.1f/%.1f", strings.TrimSuffix(k, "Ms"), l.quantile(0.5), l.quantile(0.99)))
		}
		b.Logf("opswire-cordon's own steps per %s node (%d writes; ms p50/p99): %s", verb, len(steps[verb]["tookMs"]), strings.Join(parts, ", "))
		if verb == "cordoned" {
			// The steps' rows, beside the floors of logBareRequests.
			b.ReportMetric(steps[verb]["readMs"].quantile(0.99), "cordon-read-p99-ms")
			b.ReportMetric(steps[verb]["patchMs"].quantile(0.99), "cordon-patch-p99-ms")
		}
		var in, actor, out, total latencies
		k := 0
		for _, s := range samples {
			if s.verb != verb {
				continue
			}
			if k >= len(writes[verb]) {
				break
			}
			w := writes[verb][k]
			k++
			if !s.ok || !w.hasFields || w.node != s.node {
				continue
			}
			start := w.at.Add(-w.took)
			in, actor, out, total = append(in, start.Sub(s.t0)), append(actor, w.took), append(out, s.seen.Sub(w.at)), append(total, s.seen.Sub(s.t0))
		}
		if len(total) == 0 {
			continue
		}
		if verb == "cordoned" {
			b.ReportMetric(in.quantile(0.99), "cordon-in-p99-ms")
		}
		worst := 0
		for i := range total {
			if total[i] > total[worst] {
				worst = i
			}
		}
		b.Logf("%s samples taken apart (%d matched; ms p50/p99, log times to the millisecond): trigger → actuator starts %.1f/%.1f, actuator %.1f/%.1f, "+
			"write → observer %.1f/%.1f; the slowest sample: %.1f + %.1f + %.1f ms", verb, len(total), in.quantile(0.5), in.quantile(0.99),
			actor.quantile(0.5), actor.quantile(0.99), out.quantile(0.5), out.quantile(0.99),
			float64(in[worst].Microseconds())/1000, float64(actor[worst].Microseconds())/1000, float64(out[worst].Microseconds())/1000)
	}
}

func podNames(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("pod-%05d", i))
	}
	return out
}

// restartPods writes a container status with one restart on each pod (from
// the observer's cache, so no GET), with 16 parallel writers.
func restartPods(b *testing.B, c kubernetes.Interface, obs *observer, names []string) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan string)
	started := metav1.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				obj, ok, err := obs.pods.GetStore().GetByKey(benchNamespace + "/" + name)
				if err != nil || !ok {
					select {
					case errs <- fmt.Errorf("pod %s not in the observer's cache (%v)", name, err):
					default:
					}
					continue
				}
				p := obj.(*corev1.Pod).DeepCopy()
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: p.Spec.Containers[0].Image, RestartCount: 1, Ready: true,
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
				if _, err := c.CoreV1().Pods(benchNamespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("update %s: %w", name, err):
					default:
					}
				}
			}
		}()
	}
	for _, n := range names {
		next <- n
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// createPods creates count pods with 16 parallel writers.
func createPods(b *testing.B, c kubernetes.Interface, count int, pod func(i int) *corev1.Pod) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	next := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p := pod(i)
				if _, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- fmt.Errorf("create %s: %w", p.Name, err):
					default:
					}
				}
			}
		}()
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// observer is the floor's plain client-go informer: it timestamps the
// events tests wait for, keyed "pod-add/ns/name", "pod-failed/ns/name",
// "pod-deleted/ns/name", "node-cordoned/name", "node-uncordoned/name".
type observer struct {
	mu    sync.Mutex
	waits map[string]chan time.Time
	pods  cache.SharedIndexInformer
	// restarts counts pod updates that raised a container's restart count;
	// lastRestart is when the latest was seen (unix ns).
	restarts, lastRestart atomic.Int64
}

func newObserver() *observer { return &observer{waits: map[string]chan time.Time{}} }

// expect registers interest in a key before the write that causes it.
func (o *observer) expect(key string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	o.mu.Lock()
	o.waits[key] = ch
	o.mu.Unlock()
	return ch
}

func (o *observer) see(key string) {
	now := time.Now()
	o.mu.Lock()
	ch, ok := o.waits[key]
	delete(o.waits, key)
	o.mu.Unlock()
	if ok {
		ch <- now
	}
}

func (o *observer) run(ctx context.Context, b *testing.B, c kubernetes.Interface) {
	b.Helper()
	f := informers.NewSharedInformerFactory(c, 0)
	pods, nodes := f.Core().V1().Pods().Informer(), f.Core().V1().Nodes().Informer()
	o.pods = pods
	podKey := func(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { o.see("pod-add/" + podKey(obj.(*corev1.Pod))) },
		UpdateFunc: func(old, cur any) {
			p, was := cur.(*corev1.Pod), old.(*corev1.Pod)
			if p.Status.Phase == corev1.PodFailed && was.Status.Phase != corev1.PodFailed {
				o.see("pod-failed/" + podKey(p))
			}
			if restarts(p) > restarts(was) {
				o.lastRestart.Store(time.Now().UnixNano())
				o.restarts.Add(1)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				o.see("pod-deleted/" + t.Key)
				return
			}
			o.see("pod-deleted/" + podKey(obj.(*corev1.Pod)))
		},
	})
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {
			was, is := old.(*corev1.Node).Spec.Unschedulable, cur.(*corev1.Node).Spec.Unschedulable
			switch {
			case is && !was:
				o.see("node-cordoned/" + cur.(*corev1.Node).Name)
			case was && !is:
				o.see("node-uncordoned/" + cur.(*corev1.Node).Name)
			}
		},
	})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		b.Fatal("observer caches did not sync")
	}
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// waitSince waits for an observation and returns its latency from t0.
func waitSince(t0 time.Time, ch <-chan time.Time) (time.Duration, bool) {
	select {
	case t := <-ch:
		return t.Sub(t0), true
	case <-time.After(sampleTimeout):
		return sampleTimeout, false
	}
}

func nodeSchedulable(b *testing.B, c kubernetes.Interface, name string) bool {
	return !harness.GetNode(b, c, name).Spec.Unschedulable
}

// kubeMsgs is the number of messages stored in KUBE (-1 if unknown).
func kubeMsgs(js jetstream.JetStream) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KUBE")
	if err != nil {
		return -1
	}
	info, err := st.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

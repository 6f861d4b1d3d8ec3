package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCleanup runs two opswire-cleanup replicas (least-privilege RBAC) and the
// watcher against a real API server and NATS, and walks through the rules of
// docs/cleanup.md, ending with the leader being killed.
func TestCleanup(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	stsNode := harness.CreateNode(t, cp.Client, harness.Node("worker-sts", nil))
	// Two more Ready nodes: with worker-sts not Ready, 1 of 4 stays under the
	// mass-failure brake's third.
	harness.CreateNode(t, cp.Client, harness.Node("worker-2", nil))
	harness.CreateNode(t, cp.Client, harness.Node("worker-3", nil))
	harness.CreateNamespace(t, cp.Client, "apps")
	harness.CreateNamespace(t, cp.Client, "protected")

	cfg := harness.WriteConfig(t, cleanupConfig())
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	pubs := countPublishes(t, n, "e2e")
	kc := cleanupKubeconfig(t, cp)
	procs := map[string]*harness.Process{
		"a": startCleanup(t, n, cfg, kc, "a"),
		"b": startCleanup(t, n, cfg, kc, "b"),
	}
	leaderID, leader := harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", procs)

	t.Run("evicted pod is deleted within 2s", func(t *testing.T) {
		p := harness.CreatePod(t, cp.Client, harness.Pod("apps", "evicted-1", worker.Name))
		evict(t, cp, p)
		harness.Eventually(t, 2*time.Second, "evicted pod deleted", func() bool { return !harness.PodExists(t, cp.Client, "apps", "evicted-1") })
		m := ops.WaitFor(t, 5*time.Second, "deleted decision", opsFor("deleted", "apps", "evicted-1"))
		d := decision(t, m)
		if m.ID != "cleanup/"+string(p.UID)+"/deleted" || d.PodUID != string(p.UID) || d.Node != worker.Name ||
			d.Reason != "FailedPod" || d.PodReason != "Evicted" || d.Phase != "Failed" || d.Action != "delete" || d.DryRun {
			t.Fatalf("decision %s %+v", m.ID, d)
		}
		harness.Eventually(t, 5*time.Second, "Kubernetes Event on the pod", func() bool {
			evs := cleanupEvents(t, cp, "apps", string(p.UID))
			return len(evs) == 1 && evs[0] == "CleanupDeleted"
		})
	})

	t.Run("running, excluded and opted-out pods are untouched", func(t *testing.T) {
		harness.CreatePod(t, cp.Client, harness.Pod("apps", "running-1", worker.Name))
		excluded := harness.CreatePod(t, cp.Client, harness.Pod("protected", "evicted-2", worker.Name))
		evict(t, cp, excluded)
		opt := harness.Pod("apps", "evicted-optout", worker.Name)
		opt.Labels = map[string]string{events.LabelOptOut: "true"}
		evict(t, cp, harness.CreatePod(t, cp.Client, opt))
		// A marker evicted after them: once it is gone, the others were examined.
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", "marker-1", worker.Name)))
		harness.Eventually(t, 5*time.Second, "marker deleted", func() bool { return !harness.PodExists(t, cp.Client, "apps", "marker-1") })
		m := ops.WaitFor(t, 5*time.Second, "opt-out skip", opsFor("skipped", "apps", "evicted-optout"))
		if d := decision(t, m); d.Reason != "OptedOut" || d.Verb != "skipped" {
			t.Fatalf("opt-out decision %+v", d)
		}
		harness.Never(t, 3*time.Second, "an untouched pod deleted (3 ticks)", func() bool {
			return !harness.PodExists(t, cp.Client, "apps", "running-1") || !harness.PodExists(t, cp.Client, "protected", "evicted-2") || !harness.PodExists(t, cp.Client, "apps", "evicted-optout")
		})
		if c := ops.Count(func(m harness.Msg) bool { return m.Subject == "ops.e2e.cleanup.skipped.protected.evicted-2" }); c != 0 {
			t.Fatalf("excluded namespace produced %d decisions, want none", c)
		}
	})

	t.Run("stuck terminating pod is force-deleted after the timeout, not before", func(t *testing.T) {
		harness.CreatePod(t, cp.Client, harness.Pod("apps", "stuck-1", worker.Name))
		deadline := deleteGracefully(t, cp, "apps", "stuck-1").Add(4 * time.Second)
		harness.Never(t, time.Until(deadline)-300*time.Millisecond, "force deletion before deletionTimestamp+terminatingTimeout",
			func() bool { return !harness.PodExists(t, cp.Client, "apps", "stuck-1") })
		harness.Eventually(t, time.Until(deadline)+3*time.Second, "stuck pod force-deleted", func() bool { return !harness.PodExists(t, cp.Client, "apps", "stuck-1") })
		d := decision(t, ops.WaitFor(t, 5*time.Second, "forcedeleted decision", opsFor("forcedeleted", "apps", "stuck-1")))
		if d.Reason != "StuckTerminating" || d.Action != "forcedelete" || d.Time.Before(deadline) {
			t.Fatalf("decision %+v (deadline %v)", d, deadline)
		}
	})

	t.Run("stuck pod with finalizers is reported, not force-deleted", func(t *testing.T) {
		p := harness.Pod("apps", "final-1", worker.Name)
		p.Finalizers = []string{"example.com/hold"}
		harness.CreatePod(t, cp.Client, p)
		deleteGracefully(t, cp, "apps", "final-1")
		d := decision(t, ops.WaitFor(t, 10*time.Second, "finalizer skip", opsFor("skipped", "apps", "final-1")))
		if d.Reason != "HasFinalizers" {
			t.Fatalf("decision %+v", d)
		}
		harness.Never(t, 2*time.Second, "pod with finalizers deleted", func() bool { return !harness.PodExists(t, cp.Client, "apps", "final-1") })
	})

	t.Run("statefulset pod is held while its node is Ready or Unknown, released by out-of-service", func(t *testing.T) {
		p := harness.Pod("apps", "db-0", stsNode.Name)
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: types.UID("sts-db"), Controller: &yes}}
		created := harness.CreatePod(t, cp.Client, p)
		deadline := deleteGracefully(t, cp, "apps", "db-0").Add(4 * time.Second)
		d := decision(t, ops.WaitFor(t, 10*time.Second, "statefulset skip", opsFor("skipped", "apps", "db-0")))
		if d.Reason != "StatefulSetOnReadyNode" || d.Owner == nil || d.Owner.Kind != "StatefulSet" {
			t.Fatalf("decision %+v", d)
		}
		if !harness.PodExists(t, cp.Client, "apps", "db-0") {
			t.Fatal("statefulset pod deleted on a Ready node")
		}
		// A partition looks like this from the control plane: Ready Unknown.
		harness.SetNodeStatus(t, cp.Client, stsNode.Name, func(s *corev1.NodeStatus) {
			s.Conditions[0].Status, s.Conditions[0].Reason = corev1.ConditionUnknown, "NodeStatusUnknown"
		})
		held := func(m harness.Msg) bool {
			return opsFor("skipped", "apps", "db-0")(m) && decision(t, m).Reason == "NodeNotConfirmedDown"
		}
		ops.WaitFor(t, 10*time.Second, "partition skip", held)
		harness.Never(t, time.Until(deadline.Add(15*time.Second)), "statefulset pod on an Unknown node force-deleted (15 s after its deadline)",
			func() bool { return !harness.PodExists(t, cp.Client, "apps", "db-0") })
		taintNode(t, cp, stsNode.Name, corev1.Taint{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		harness.Eventually(t, 5*time.Second, "statefulset pod force-deleted once its node is out of service", func() bool {
			return !harness.PodExists(t, cp.Client, "apps", "db-0")
		})
		if d := decision(t, ops.WaitFor(t, 5*time.Second, "forcedeleted decision", opsFor("forcedeleted", "apps", "db-0"))); d.Reason != "StuckTerminating" {
			t.Fatalf("decision %+v", d)
		}
		harness.Eventually(t, 5*time.Second, "CleanupForceDeleted Event", func() bool {
			for _, r := range cleanupEvents(t, cp, "apps", string(created.UID)) {
				if r == "CleanupForceDeleted" {
					return true
				}
			}
			return false
		})
	})

	t.Run("malformed KUBE message is skipped and counted", func(t *testing.T) {
		before := leader.Metric("opswire_kube_messages_malformed_total")
		if _, err := n.JS.Publish(context.Background(), "kube.e2e.pod.apps.garbage", []byte("{not json")); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 5*time.Second, "malformed message counted", func() bool {
			return leader.Metric("opswire_kube_messages_malformed_total") > before
		})
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", "marker-2", worker.Name)))
		harness.Eventually(t, 5*time.Second, "cleanup still acting", func() bool { return !harness.PodExists(t, cp.Client, "apps", "marker-2") })
	})

	t.Run("a refused delete is reported once and retried", func(t *testing.T) {
		denyPodDeletes(t, cp, "e2e.opswire.io/deny-delete")
		p := harness.Pod("apps", "refused-1", worker.Name)
		p.Labels = map[string]string{"e2e.opswire.io/deny-delete": "true"}
		created := harness.CreatePod(t, cp.Client, p)
		evict(t, cp, created)
		d := decision(t, ops.WaitFor(t, 5*time.Second, "failed decision", opsFor("failed", "apps", "refused-1")))
		if d.Error == "" || d.Action != "delete" || d.Severity != events.SeverityCritical {
			t.Fatalf("decision %+v", d)
		}
		harness.Eventually(t, 5*time.Second, "CleanupFailed Event", func() bool {
			for _, r := range cleanupEvents(t, cp, "apps", string(created.UID)) {
				if r == "CleanupFailed" {
					return true
				}
			}
			return false
		})
		// Retries continue with backoff (several within 2 s) and publish nothing more.
		harness.Never(t, 2*time.Second, "refused pod deleted", func() bool { return !harness.PodExists(t, cp.Client, "apps", "refused-1") })
		allowPodDeletes(t, cp)
		harness.Eventually(t, 10*time.Second, "pod deleted on retry", func() bool { return !harness.PodExists(t, cp.Client, "apps", "refused-1") })
		ops.WaitFor(t, 5*time.Second, "deleted decision", opsFor("deleted", "apps", "refused-1"))
	})

	var beforeKill map[string]int
	t.Run("leader killed: the standby continues", func(t *testing.T) {
		beforeKill = pubs.Counts()
		leader.Kill()
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", "after-failover", worker.Name)))
		standby := map[string]*harness.Process{}
		for id, p := range procs {
			if id != leaderID {
				standby[id] = p
			}
		}
		newID, _ := harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", standby)
		harness.Eventually(t, 10*time.Second, "pod deleted by the new leader", func() bool { return !harness.PodExists(t, cp.Client, "apps", "after-failover") })
		m := ops.WaitFor(t, 5*time.Second, "deleted decision", opsFor("deleted", "apps", "after-failover"))
		if m.Header.Get("ce-source") != "opswire/e2e/cleanup" {
			t.Fatalf("ce-source %q", m.Header.Get("ce-source"))
		}
		t.Logf("leader %s killed, %s took over", leaderID, newID)
	})

	t.Run("every pod accounted for exactly once", func(t *testing.T) {
		// Let the new leader tick over the whole state a few times first.
		harness.Never(t, 3*time.Second, "a held pod deleted after failover", func() bool {
			return !harness.PodExists(t, cp.Client, "apps", "final-1") || !harness.PodExists(t, cp.Client, "apps", "evicted-optout")
		})
		// Counted at the source, on a core-NATS subscription: the stream would
		// drop a repeat with the same id.
		counts := pubs.Counts()
		// A new leader may publish a held pod's skip once more, by design
		// (docs/cleanup.md: the id makes it a duplicate in the stream); any
		// other repeat, by either leader, is a double.
		for _, s := range []string{"ops.e2e.cleanup.skipped.apps.evicted-optout", "ops.e2e.cleanup.skipped.apps.final-1"} {
			if counts[s] == beforeKill[s]+1 && beforeKill[s] == 1 {
				counts[s]--
			}
		}
		want := map[string]int{
			"ops.e2e.cleanup.deleted.apps.evicted-1":      1,
			"ops.e2e.cleanup.deleted.apps.marker-1":       1,
			"ops.e2e.cleanup.skipped.apps.evicted-optout": 1,
			"ops.e2e.cleanup.forcedeleted.apps.stuck-1":   1,
			"ops.e2e.cleanup.skipped.apps.final-1":        1,
			"ops.e2e.cleanup.skipped.apps.db-0":           2, // StatefulSetOnReadyNode, NodeNotConfirmedDown
			"ops.e2e.cleanup.forcedeleted.apps.db-0":      1,
			"ops.e2e.cleanup.deleted.apps.marker-2":       1,
			"ops.e2e.cleanup.failed.apps.refused-1":       1,
			"ops.e2e.cleanup.deleted.apps.refused-1":      1,
			"ops.e2e.cleanup.deleted.apps.after-failover": 1,
		}
		var got, exp []string
		for s, c := range counts {
			got = append(got, fmt.Sprintf("%s=%d", s, c))
		}
		for s, c := range want {
			exp = append(exp, fmt.Sprintf("%s=%d", s, c))
		}
		sort.Strings(got)
		sort.Strings(exp)
		if fmt.Sprint(got) != fmt.Sprint(exp) {
			t.Fatalf("cleanup outcomes published:\n%v\nwant\n%v", got, exp)
		}
		// Every evicted pod's Event recorded once (repeats merge into one
		// object, so its count is what shows a double).
		for _, pod := range []string{"evicted-1", "marker-1", "marker-2", "after-failover"} {
			uid := ""
			for _, m := range ops.All() {
				if m.Subject == "ops.e2e.cleanup.deleted.apps."+pod {
					uid = decision(t, m).PodUID
				}
			}
			if evs := cleanupEvents(t, cp, "apps", uid); len(evs) != 1 || evs[0] != "CleanupDeleted" {
				t.Errorf("%s: Events %v, want one CleanupDeleted", pod, evs)
			}
		}
	})
}

// TestCleanupRateLimit evicts 100 pods before the actor starts, with a cap of
// 20 deletions per 2 s window: 20 go in the first window, the rest in later
// windows, and every pod is deleted and audited exactly once. Then, with
// removeFinalizers, a stuck pod with finalizers is cleared and force-deleted.
func TestCleanupRateLimit(t *testing.T) {
	const total, perWindow, window = 100, 20, 2 * time.Second
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "bulk")
	cfg := harness.WriteConfig(t, cleanupConfig("maxDeletionsPerMinute: 20", "rateWindow: 2s", "removeFinalizers: true"))
	startWatcher(t, cp, n, cfg, "w1")
	for i := range total {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("ev-%03d", i), worker.Name)))
	}
	harness.Eventually(t, 20*time.Second, "all evictions in KUBE", func() bool {
		for i := range total {
			s := lastPod(t, n.JS, "kube.e2e.pod.bulk."+fmt.Sprintf("ev-%03d", i))
			if s == nil || s.Phase != "Failed" {
				return false
			}
		}
		return true
	})
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	pubs := countPublishes(t, n, "e2e")
	proxy := harness.StartAPIProxy(t, cp)
	p := startCleanup(t, n, cfg, proxy.Kubeconfig(t, cleanupKubeconfig(t, cp)), "a")
	deleted := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cleanup.deleted.bulk.") }
	harness.Eventually(t, 30*time.Second, "100 deletions audited", func() bool { return ops.Count(deleted) >= total })
	// Counted at the source (the stream drops a repeat with the same id):
	// each pod's DELETE sent once through the proxy, its outcome published once.
	dels, published := podDeletes(proxy, "bulk"), pubs.Counts()
	for i := range total {
		name := fmt.Sprintf("ev-%03d", i)
		if c := dels["bulk/"+name]; c != 1 {
			t.Errorf("%s: %d DELETEs sent, want 1", name, c)
		}
		if c := published["ops.e2e.cleanup.deleted.bulk."+name]; c != 1 {
			t.Errorf("%s: deleted published %d times, want 1", name, c)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	var times []time.Time
	uids := map[string]bool{}
	for _, m := range ops.All() {
		if !deleted(m) {
			continue
		}
		d := decision(t, m)
		if uids[d.PodUID] {
			t.Fatalf("pod %s deleted twice", d.Pod)
		}
		uids[d.PodUID] = true
		times = append(times, d.Time)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	if len(times) != total {
		t.Fatalf("%d deletions audited, want %d", len(times), total)
	}
	// The window counts a deletion from its DELETE's answer; the audit time
	// is taken before the DELETE (on the API server's clock, a lower bound
	// that steps), hence a small tolerance.
	const slack = 250 * time.Millisecond
	for i := 0; i+perWindow < len(times); i++ {
		if gap := times[i+perWindow].Sub(times[i]); gap < window-slack {
			t.Fatalf("deletions %d and %d only %v apart: more than %d in a %v window", i, i+perWindow, gap, perWindow, window)
		}
	}
	if first := times[perWindow-1].Sub(times[0]); first >= window {
		t.Fatalf("the first %d deletions took %v, want within one window", perWindow, first)
	}
	t.Logf("100 deletions over %v; 21st after %v", times[total-1].Sub(times[0]), times[perWindow].Sub(times[0]))
	for i := range total {
		if harness.PodExists(t, cp.Client, "bulk", fmt.Sprintf("ev-%03d", i)) {
			t.Fatalf("ev-%03d still exists", i)
		}
	}
	if v := p.Metric("opswire_cleanup_rate_limited_total"); v < 1 {
		t.Fatalf("opswire_cleanup_rate_limited_total = %v, want > 0", v)
	}

	t.Run("removeFinalizers clears finalizers, then force-deletes", func(t *testing.T) {
		pod := harness.Pod("bulk", "final-1", worker.Name)
		pod.Finalizers = []string{"example.com/hold"}
		harness.CreatePod(t, cp.Client, pod)
		deleteGracefully(t, cp, "bulk", "final-1")
		harness.Eventually(t, 15*time.Second, "pod with finalizers gone", func() bool { return !harness.PodExists(t, cp.Client, "bulk", "final-1") })
		ops.WaitFor(t, 5*time.Second, "forcedeleted decision", opsFor("forcedeleted", "bulk", "final-1"))
	})
}

// TestCleanupDryRun: --dry-run deletes nothing, writes no Events, and
// publishes each decision once.
func TestCleanupDryRun(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "apps")
	cfg := harness.WriteConfig(t, cleanupConfig())
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	startCleanup(t, n, cfg, cleanupKubeconfig(t, cp), "a", "--dry-run")

	ev := harness.CreatePod(t, cp.Client, harness.Pod("apps", "evicted-1", worker.Name))
	evict(t, cp, ev)
	stuck := harness.CreatePod(t, cp.Client, harness.Pod("apps", "stuck-1", worker.Name))
	deleteGracefully(t, cp, "apps", "stuck-1")

	m := ops.WaitFor(t, 5*time.Second, "dry-run delete decision", opsFor("dryrun", "apps", "evicted-1"))
	if d := decision(t, m); !d.DryRun || d.Action != "delete" || m.ID != "cleanup/"+string(ev.UID)+"/dryrun/delete" {
		t.Fatalf("decision %s %+v", m.ID, d)
	}
	if d := decision(t, ops.WaitFor(t, 10*time.Second, "dry-run force decision", opsFor("dryrun", "apps", "stuck-1"))); !d.DryRun || d.Action != "forcedelete" {
		t.Fatalf("decision %+v", d)
	}
	harness.Never(t, 3*time.Second, "a pod deleted in dry-run (3 ticks)", func() bool {
		return !harness.PodExists(t, cp.Client, "apps", "evicted-1") || !harness.PodExists(t, cp.Client, "apps", "stuck-1")
	})
	for _, uid := range []types.UID{ev.UID, stuck.UID} {
		if evs := cleanupEvents(t, cp, "apps", string(uid)); len(evs) != 0 {
			t.Fatalf("dry-run wrote Events %v", evs)
		}
	}
	if c := ops.Count(func(harness.Msg) bool { return true }); c != 2 {
		t.Fatalf("%d decisions published, want 2 (each once)", c)
	}
}

// TestCleanupSeedConfig runs the watcher and the cleanup actor with the seed's
// config.yml, unchanged (leader election in kube-system, cluster "default").
func TestCleanupSeedConfig(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	cfg := harness.WriteConfig(t, cleanupSeedYAML)
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.default.cleanup.>")
	p := startCleanup(t, n, cfg, cp.Kubeconfig, "a")
	harness.Eventually(t, 30*time.Second, "seed lease held", func() bool {
		return harness.LeaseHolder(cp.Client, "kube-system", "ops-resource-controller-cleanup") == "a" && p.Ready()
	})
	evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("default", "evicted-1", worker.Name)))
	harness.Eventually(t, 2*time.Second, "evicted pod deleted", func() bool { return !harness.PodExists(t, cp.Client, "default", "evicted-1") })
	ops.WaitFor(t, 5*time.Second, "deleted decision", harness.Subject("ops.default.cleanup.deleted.default.evicted-1"))
	if code := p.Stop(); code != 0 {
		t.Fatalf("exit code %d on SIGTERM, want 0", code)
	}
	if h := harness.LeaseHolder(cp.Client, "kube-system", "ops-resource-controller-cleanup"); h != "" {
		t.Fatalf("lease still held by %q after shutdown, want released", h)
	}
}

// cleanupSeedYAML is the seed article's config.yml, byte for byte.
const cleanupSeedYAML = `sendReport:
  total: 100
  schedule: "00 00 10 * * 1"
  msgtitle: "pod重启次数过多"
  apiurl: "https://open.feishu.cn/open-apis/bot/v2/hook/xxx"
  enable: true
autoCordon:
  enable: true
  interval: 1m
  maxPods: 100
  minPods: 90
delException:
  enable: true
  interval: 2m
  msgtitle: "删除异常状态 Pod"
  apiurl: "https://open.feishu.cn/open-apis/bot/v2/hook/xxx"
controller:
  controllerResyncPeriod: 10
  InformersResyncPeriod: 30
  LeaderElect: true
  leaseLockName: ops-resource-controller
  leaseLockNamespace: kube-system
`

package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// faultAPIConfig keeps the leases through an API outage of tens of seconds
// (renewDeadline above the outage), so this test is about the watcher's
// state, not leadership; TestFaultAPIServerOutageLeaders loses the leases.
const faultAPIConfig = `
cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 90s
  renewDeadline: 80s
  retryPeriod: 1s
delException:
  interval: 1s
  minAge: 0s
  terminatingTimeout: 4s
`

// TestFaultAPIServerRestart restarts kube-apiserver mid-run (same etcd, same
// port), then forces a watch expiry, and checks that KUBE converges to the
// API's state each time and that cleanup, re-verifying against the API, makes
// no wrong write and no double one (DELETEs counted at a proxy in front of the
// API, not in OPS).
//
// Phase 1, restart: the watcher's path to the API is cut for the restart and
// for changes made after it (from the watcher's side the API is down while they
// happen, as with an HA control plane where another API server took them);
// then it reconnects by itself.
// Phase 2, watch expiry: the watcher is frozen (SIGSTOP), objects change and are
// deleted, etcd is compacted past everything the watcher has seen and the API
// server restarted (its watch cache starts after the compaction too), then the
// watcher resumes: its watch gets 410 Gone, it relists, tombstones follow.
// Its path to the API is cut while it is frozen, so no event reaches its
// socket buffers either.
func TestFaultAPIServerRestart(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	ctx := context.Background()
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNode(t, cp.Client, harness.Node("worker-2", nil))
	for i := range 5 {
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("keep-%d", i), node.Name))
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("gone-%d", i), node.Name))
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("late-%d", i), node.Name))
	}
	reborn := harness.CreatePod(t, cp.Client, harness.Pod("default", "reborn", node.Name))
	evict(t, cp, reborn)

	cfg := harness.WriteConfig(t, faultAPIConfig)
	wpx := harness.StartAPIProxy(t, cp)
	w := harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: wpx.Kubeconfig(t, cp.Kubeconfig), NATSURL: n.URL, ID: "w1"})
	w.WaitReady(t, 60*time.Second)
	waitConverged(t, cp, n.JS, time.Now(), 30*time.Second)

	// Phase 1: the restart.
	wpx.Cut()
	down := time.Now()
	cp.StopAPIServer(t)
	cp.StartAPIServer(t)
	t.Logf("kube-apiserver down for %v (stop, start, /readyz)", time.Since(down).Round(time.Millisecond))
	// Changed while the watcher cannot see the API: pods deleted, one
	// recreated under the same name (KUBE still says Evicted, with the old
	// uid), pods evicted, pods created.
	for i := range 5 {
		deletePodNow(t, cp, "default", fmt.Sprintf("gone-%d", i))
		evict(t, cp, mustGetPod(t, cp, "default", fmt.Sprintf("late-%d", i)))
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("new-%d", i), node.Name))
	}
	deletePodNow(t, cp, "default", "reborn")
	newReborn := harness.CreatePod(t, cp.Client, harness.Pod("default", "reborn", node.Name))

	// cleanup becomes leader on the stale mirror: it sees "reborn" Evicted.
	cpx := harness.StartAPIProxy(t, cp)
	c := harness.StartService(t, "cleanup", harness.ServiceOptions{Config: cfg, Kubeconfig: cpx.Kubeconfig(t, cleanupKubeconfig(t, cp)), NATSURL: n.URL, ID: "c1"})
	harness.Eventually(t, 60*time.Second, "cleanup to re-verify reborn and find it recreated", func() bool {
		return c.Metric(`opswire_cleanup_recheck_abandoned_total{why="recreated"}`) >= 1
	})
	if s := lastPod(t, n.JS, subject.Pod("e2e", "default", "reborn")); s == nil || s.UID != string(reborn.UID) {
		t.Fatalf("KUBE was not stale when cleanup decided (state %+v); the test proves nothing", s)
	}

	listsBefore := listsOf(wpx, "pods")
	wpx.Restore()
	back := time.Now()
	conv := waitConverged(t, cp, n.JS, back, 90*time.Second)
	// cleanup deletes the evicted pods once KUBE shows them; the deletions
	// are changes KUBE converges to as well.
	harness.Eventually(t, 30*time.Second, "the 5 pods evicted during the outage deleted", func() bool {
		for i := range 5 {
			if harness.PodExists(t, cp.Client, "default", fmt.Sprintf("late-%d", i)) {
				return false
			}
		}
		return true
	})
	conv2 := waitConverged(t, cp, n.JS, back, 30*time.Second)
	relists := listsOf(wpx, "pods") - listsBefore
	t.Logf("restart: KUBE converged %v after the watcher could reach the API again (%v including cleanup's deletions); "+
		"%d pod list(s) by the watcher", conv.Round(time.Millisecond), conv2.Round(time.Millisecond), relists)
	if relists < 1 {
		t.Fatalf("the watcher did not relist pods after the restart")
	}
	if got := deletesOf(cpx, "default", "reborn"); got != 0 {
		t.Fatalf("%d DELETE of the recreated pod reborn, want 0", got)
	}
	if live := mustGetPod(t, cp, "default", "reborn"); live.UID != newReborn.UID {
		t.Fatalf("reborn has uid %s, want %s", live.UID, newReborn.UID)
	}
	wrong := 0
	for i := range 5 {
		if d := deletesOf(cpx, "default", fmt.Sprintf("late-%d", i)); d != 1 {
			t.Errorf("late-%d: %d DELETE requests, want exactly 1", i, d)
		}
		for _, name := range []string{"keep", "new"} {
			wrong += deletesOf(cpx, "default", fmt.Sprintf("%s-%d", name, i))
		}
	}
	if wrong != 0 {
		t.Fatalf("%d DELETE requests for running pods", wrong)
	}
	if w.Exited() || c.Exited() {
		t.Fatalf("a service exited (watcher %v, cleanup %v)", w.Exited(), c.Exited())
	}

	// Phase 2: watch expiry, with a watcher that lists and watches. client-go's
	// default streaming list re-lists (resourceVersionMatch=NotOlderThan)
	// whenever a watch ends and never watches from an old revision; LIST and
	// WATCH is what it falls back to on API servers without streaming lists,
	// and the path where a 410 Gone happens.
	if code := w.Stop(); code != 0 {
		t.Fatalf("watcher w1 exit code %d", code)
	}
	w = harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: wpx.Kubeconfig(t, cp.Kubeconfig), NATSURL: n.URL, ID: "w2",
		Env: []string{"KUBE_FEATURE_WatchListClient=false"}})
	w.WaitReady(t, 60*time.Second)
	harness.Eventually(t, 30*time.Second, "w2 to lead", func() bool { return harness.LeaseHolder(cp.Client, "default", "opswire-watcher") == "w2" })
	waitConverged(t, cp, n.JS, time.Now(), 30*time.Second)
	// Frozen first, then cut: the watches end cleanly
	// (as an API server ends them) and nothing after that reaches the frozen
	// process's sockets; on SIGCONT it watches again from its last
	// resourceVersion, which etcd no longer has.
	t.Logf("frozen: all threads stopped %v after SIGSTOP", w.Freeze(t))
	wpx.Cut()
	frozen := true
	defer func() {
		if frozen {
			_ = w.Signal(syscall.SIGCONT)
		}
	}()
	seenRV := cp.EtcdRevision(t)
	for i := range 3 {
		deletePodNow(t, cp, "default", fmt.Sprintf("keep-%d", i))
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("after-%d", i), "worker-2"))
	}
	pod := mustGetPod(t, cp, "default", "new-0")
	harness.SetPodStatus(t, cp.Client, pod, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })
	cp.StopAPIServer(t)
	compacted := cp.CompactEtcd(t)
	cp.StartAPIServer(t)
	if compacted <= seenRV {
		t.Fatalf("compacted to %d, not past the watcher's %d", compacted, seenRV)
	}
	listsBefore = listsOf(wpx, "pods")
	wpx.Restore()
	_ = w.Signal(syscall.SIGCONT)
	frozen = false
	resumed := time.Now()
	conv = waitConverged(t, cp, n.JS, resumed, 90*time.Second)
	relists = listsOf(wpx, "pods") - listsBefore
	expired := wpx.Count(func(r harness.APIRequest) bool { return r.Expired })
	t.Logf("watch expiry: etcd compacted to revision %d (watcher had seen ≤ %d); KUBE converged %v after SIGCONT; "+
		"%d pod list(s), %d watch(es) answered 410 Gone", compacted, seenRV, conv.Round(time.Millisecond), relists, expired)
	if expired < 1 {
		t.Fatalf("no watch of the watcher was answered 410 Gone; the expiry was not exercised")
	}
	if relists < 1 {
		t.Fatalf("the watcher did not relist pods after the watch expired")
	}
	for i := range 3 {
		s := lastPod(t, n.JS, subject.Pod("e2e", "default", fmt.Sprintf("keep-%d", i)))
		if s == nil || s.Op != "delete" {
			t.Fatalf("keep-%d: no tombstone after the relist (%+v)", i, s)
		}
	}
	// Nothing stale left behind, and nothing in flight changes that.
	harness.Never(t, 2*time.Second, "KUBE to diverge again", func() bool { return kubeDivergence(t, cp, n.JS) != "" })
	if got := c.Metric(`opswire_cleanup_decisions_total{reason="FailedPod",verb="deleted"}`); got != 5 {
		t.Fatalf("cleanup counted %v deletions, want 5", got)
	}
	if w.Exited() || c.Exited() {
		t.Fatalf("a service exited (watcher %v, cleanup %v)", w.Exited(), c.Exited())
	}
	_ = ctx
}

func mustGetPod(t *testing.T, cp *harness.ControlPlane, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := cp.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s/%s: %v", ns, name, err)
	}
	return p
}

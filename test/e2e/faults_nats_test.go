package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/test/harness"
)

const faultNATSConfig = `
cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
nats:
  replicas: 3
delException:
  interval: 1s
  minAge: 0s
  maxDeletionsPerMinute: 1000
`

// TestFaultNATSLeaderKilled runs the watcher and cleanup against a 3-node
// JetStream cluster of real nats-server processes (KUBE and OPS with 3
// replicas, services given all three URLs) and SIGKILLs the node leading OPS
// in the middle of a burst of 100 evicted pods: every pod is deleted exactly
// once (DELETE requests counted at a proxy in front of the API, where the
// stream's deduplication cannot hide a repeat), OPS holds one decision for
// each (none lost), KUBE converges, and the restarted node catches up.
func TestFaultNATSLeaderKilled(t *testing.T) {
	const total = 100
	cp := harness.StartControlPlane(t)
	cl := harness.StartNATSCluster(t, 3)
	harness.CreateNamespace(t, cp.Client, "bulk")
	for i := range 4 {
		harness.CreateNode(t, cp.Client, harness.Node(fmt.Sprintf("worker-%d", i), nil))
	}
	for i := range total {
		harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("ev-%03d", i), fmt.Sprintf("worker-%d", i%4)))
	}
	cfg := harness.WriteConfig(t, faultNATSConfig)
	w := harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: cl.URL, ID: "w1"})
	w.WaitReady(t, 60*time.Second)
	waitConverged(t, cp, cl.JS, time.Now(), 60*time.Second)
	for _, s := range []string{"KUBE", "OPS"} {
		info, err := cl.StreamInfo(s)
		if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: %v %+v", s, err, info)
		}
	}
	px := harness.StartAPIProxy(t, cp)
	c := harness.StartService(t, "cleanup", harness.ServiceOptions{Config: cfg, Kubeconfig: px.Kubeconfig(t, cleanupKubeconfig(t, cp)), NATSURL: cl.URL, ID: "c1"})
	c.WaitReady(t, 60*time.Second)

	deletes := func() int {
		return px.Count(func(r harness.APIRequest) bool {
			return r.Method == "DELETE" && strings.HasPrefix(r.Path, "/api/v1/namespaces/bulk/pods/")
		})
	}
	var killed int
	var killedAt time.Time
	start := time.Now()
	for i := range total {
		evict(t, cp, mustGetPod(t, cp, "bulk", fmt.Sprintf("ev-%03d", i)))
		if i == total/2 {
			harness.Eventually(t, 30*time.Second, "deletions under way", func() bool { return deletes() >= 20 })
			info, err := cl.StreamInfo("OPS")
			if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
				t.Fatalf("OPS leader: %v", err)
			}
			killed = cl.Index(info.Cluster.Leader)
			// KUBE's leader, for the log only: the kill goes ahead without it.
			kubeLeader := "unknown"
			if kube, err := cl.StreamInfo("KUBE"); err != nil {
				kubeLeader = "unknown: " + err.Error()
			} else if kube.Cluster != nil && kube.Cluster.Leader != "" {
				kubeLeader = kube.Cluster.Leader
			}
			cl.Kill(t, killed)
			killedAt = time.Now()
			t.Logf("SIGKILLed %s, the OPS leader (KUBE's leader was %s), after %d DELETEs", info.Cluster.Leader, kubeLeader, deletes())
		}
	}
	var newLeader string
	harness.Eventually(t, 30*time.Second, "a new OPS leader", func() bool {
		info, err := cl.StreamInfo("OPS")
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != cl.Names()[killed] {
			newLeader = info.Cluster.Leader
			return true
		}
		return false
	})
	election := time.Since(killedAt)
	harness.Eventually(t, 90*time.Second, "all 100 pods deleted", func() bool {
		for i := range total {
			if harness.PodExists(t, cp.Client, "bulk", fmt.Sprintf("ev-%03d", i)) {
				return false
			}
		}
		return true
	})
	burst := time.Since(start)
	dup := 0
	for i := range total {
		if d := deletesOf(px, "bulk", fmt.Sprintf("ev-%03d", i)); d != 1 {
			dup += d - 1
			t.Errorf("ev-%03d: %d DELETE requests, want 1", i, d)
		}
	}
	// Every deletion is in OPS, once.
	var stored map[string]int
	harness.Eventually(t, 30*time.Second, "100 deletions in OPS", func() bool {
		stored = opsSubjects(t, cl.JS, "ops.e2e.cleanup.deleted.bulk.>")
		return len(stored) >= total
	})
	repeats := 0
	for _, n := range stored {
		repeats += n - 1
	}
	conv := waitConverged(t, cp, cl.JS, killedAt, 60*time.Second)
	t.Logf("OPS leader %s → %s in %v; 100 evictions cleaned up in %v; %d DELETEs (%d repeated), %d of %d deletions in OPS (%d lost, %d stored twice); KUBE converged %v after the kill",
		cl.Names()[killed], newLeader, election.Round(time.Millisecond), burst.Round(time.Millisecond), deletes(), dup, len(stored), total,
		total-len(stored), repeats, conv.Round(time.Millisecond))
	if dup != 0 || len(stored) != total || repeats != 0 {
		t.Fatalf("lost or doubled actions")
	}
	if w.Exited() || c.Exited() {
		t.Fatalf("a service exited (watcher %v, cleanup %v)", w.Exited(), c.Exited())
	}

	// The node comes back and catches up; the services keep working.
	restarted := time.Now()
	cl.Start(t, killed)
	harness.Eventually(t, 60*time.Second, "the restarted node current on KUBE and OPS", func() bool {
		for _, s := range []string{"KUBE", "OPS"} {
			info, err := cl.StreamInfo(s)
			if err != nil || info.Cluster == nil {
				return false
			}
			found := info.Cluster.Leader == cl.Names()[killed]
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Lag != 0 || r.Offline {
					return false
				}
				found = found || r.Name == cl.Names()[killed]
			}
			if !found || len(info.Cluster.Replicas) != 2 {
				return false
			}
		}
		return true
	})
	t.Logf("%s caught up on KUBE and OPS %v after its restart", cl.Names()[killed], time.Since(restarted).Round(time.Millisecond))
	evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("bulk", "after", "worker-0")))
	harness.Eventually(t, 30*time.Second, "a pod evicted after the restart deleted", func() bool { return !harness.PodExists(t, cp.Client, "bulk", "after") })

	// The whole cluster stopped for the 30 s (OPSWIRE_FAULT_OUTAGE=10s
	// for a shorter one while developing), pods evicted meanwhile, then
	// started again.
	outage := 30 * time.Second
	if v := os.Getenv("OPSWIRE_FAULT_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("OPSWIRE_FAULT_OUTAGE: %v", err)
		}
		outage = d
	}
	for i := range cl.Names() {
		cl.Stop(t, i)
	}
	stopped := time.Now()
	for i := range 5 {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("dark-%d", i), "worker-1")))
	}
	time.Sleep(time.Until(stopped.Add(outage)))
	if w.Exited() || c.Exited() {
		t.Fatalf("a service exited while NATS was down (watcher %v, cleanup %v)", w.Exited(), c.Exited())
	}
	for i := range cl.Names() {
		cl.Start(t, i)
	}
	started := time.Now()
	harness.Eventually(t, 120*time.Second, "the pods evicted while NATS was down deleted", func() bool {
		for i := range 5 {
			if harness.PodExists(t, cp.Client, "bulk", fmt.Sprintf("dark-%d", i)) {
				return false
			}
		}
		return true
	})
	cleaned := time.Since(started)
	harness.Eventually(t, 60*time.Second, "their deletions in OPS", func() bool {
		n := 0
		for subj := range opsSubjects(t, cl.JS, "ops.e2e.cleanup.deleted.bulk.>") {
			if strings.HasPrefix(subj, "ops.e2e.cleanup.deleted.bulk.dark-") {
				n++
			}
		}
		return n == 5
	})
	conv = waitConverged(t, cp, cl.JS, started, 60*time.Second)
	for i := range 5 {
		if d := deletesOf(px, "bulk", fmt.Sprintf("dark-%d", i)); d != 1 {
			t.Errorf("dark-%d: %d DELETE requests, want 1", i, d)
		}
	}
	t.Logf("whole cluster stopped %v: the 5 pods evicted meanwhile deleted %v after it started again, each by 1 DELETE, all 5 in OPS; KUBE converged %v after the start",
		started.Sub(stopped).Round(time.Millisecond), cleaned.Round(time.Millisecond), conv.Round(time.Millisecond))
	if w.Exited() || c.Exited() {
		t.Fatalf("a service exited (watcher %v, cleanup %v)", w.Exited(), c.Exited())
	}
}

// opsSubjects counts the OPS messages stored per subject under filter.
func opsSubjects(t *testing.T, js jetstream.JetStream, filter string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "OPS")
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil
	}
	out := map[string]int{}
	for s, n := range info.State.Subjects {
		out[s] = int(n)
	}
	return out
}

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

const watcherConfig = `
cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
`

// TestWatcherMirrorsCluster follows one node and its pods through the
// situations the actors depend on.
func TestWatcherMirrorsCluster(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	ctx := context.Background()
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1.example", map[string]string{"pool": "a"}))
	for i := 0; i < 3; i++ {
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("web-%d", i), node.Name))
	}
	startWatcher(t, cp, n, harness.WriteConfig(t, watcherConfig), "w1")

	nodeSubj := subject.Node("e2e", node.Name)
	if nodeSubj != "kube.e2e.node.worker-1_example" {
		t.Fatalf("node subject %q does not encode the dots", nodeSubj)
	}
	podSubj := subject.Pod("e2e", "default", "web-0")
	harness.Eventually(t, 15*time.Second, "node with 3 pods in KUBE", func() bool {
		s := lastNode(t, n.JS, nodeSubj)
		return s != nil && s.Pods == 3 && s.Ready == "True" && s.AllocatablePods == 110 && s.Labels["pool"] == "a"
	})
	harness.Eventually(t, 5*time.Second, "pods in KUBE", func() bool {
		s := lastPod(t, n.JS, podSubj)
		return s != nil && s.NodeName == node.Name && s.UID != ""
	})

	t.Run("evicted pod gets a new snapshot and leaves the count", func(t *testing.T) {
		pod, _ := cp.Client.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{})
		harness.SetPodStatus(t, cp.Client, pod, func(s *corev1.PodStatus) {
			s.Phase, s.Reason, s.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		})
		harness.Eventually(t, 5*time.Second, "Failed/Evicted snapshot", func() bool {
			s := lastPod(t, n.JS, subject.Pod("e2e", "default", "web-1"))
			return s != nil && s.Phase == "Failed" && s.Reason == "Evicted"
		})
		harness.Eventually(t, 5*time.Second, "node count 2", func() bool {
			s := lastNode(t, n.JS, nodeSubj)
			return s != nil && s.Pods == 2
		})
	})

	t.Run("irrelevant change publishes nothing", func(t *testing.T) {
		before := kubeLastSeq(t, n)
		pod, _ := cp.Client.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{})
		pod.Annotations = map[string]string{"example.com/note": "hello"}
		if _, err := cp.Client.CoreV1().Pods("default").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A node heartbeat is the other common no-op.
		harness.SetNodeStatus(t, cp.Client, node.Name, func(s *corev1.NodeStatus) {
			s.Conditions[0].LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Second))
		})
		// Then a relevant change as a marker: once it is stored, the no-ops
		// before it have been processed.
		harness.CreatePod(t, cp.Client, harness.Pod("default", "marker", ""))
		harness.Eventually(t, 5*time.Second, "marker pod", func() bool {
			return lastPod(t, n.JS, subject.Pod("e2e", "default", "marker")) != nil
		})
		if got := kubeLastSeq(t, n) - before; got != 1 {
			t.Fatalf("%d messages stored, want 1 (the marker only)", got)
		}
	})

	t.Run("count follows creations and deletions; deleted pod gets a tombstone", func(t *testing.T) {
		harness.CreatePod(t, cp.Client, harness.Pod("default", "web-9", node.Name))
		harness.Eventually(t, 5*time.Second, "node count 3", func() bool {
			s := lastNode(t, n.JS, nodeSubj)
			return s != nil && s.Pods == 3
		})
		if err := cp.Client.CoreV1().Pods("default").Delete(ctx, "marker", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 5*time.Second, "tombstone", func() bool {
			s := lastPod(t, n.JS, subject.Pod("e2e", "default", "marker"))
			return s != nil && s.Op == events.OpDelete && s.UID != ""
		})
		msg, err := getLast(n, subject.Pod("e2e", "default", "marker"))
		if err != nil {
			t.Fatal(err)
		}
		if ttl := msg.Header.Get("Nats-TTL"); ttl == "" {
			t.Fatalf("tombstone has no per-message TTL; headers %v", msg.Header)
		}
	})
}

// TestWatcherRestartLeavesNoDuplicatesOrGaps stops the watcher, changes the
// cluster, starts it again, and counts exactly what is stored.
func TestWatcherRestartLeavesNoDuplicatesOrGaps(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	ctx := context.Background()
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	for i := 0; i < 20; i++ {
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("p-%d", i), node.Name))
	}
	cfg := harness.WriteConfig(t, watcherConfig)
	w := startWatcher(t, cp, n, cfg, "w1")
	harness.Eventually(t, 15*time.Second, "20 pods counted", func() bool {
		s := lastNode(t, n.JS, subject.Node("e2e", "worker-1"))
		return s != nil && s.Pods == 20
	})
	if code := w.Stop(); code != 0 {
		t.Fatalf("watcher exit code %d on SIGTERM, want 0", code)
	}
	before := kubeLastSeq(t, n)

	// While it is away: one pod created, one deleted (the node count nets out,
	// its departure total grows by one), one pod's status changes.
	harness.CreatePod(t, cp.Client, harness.Pod("default", "new", node.Name))
	deletePodNow(t, cp, "default", "p-0")
	p5, _ := cp.Client.CoreV1().Pods("default").Get(ctx, "p-5", metav1.GetOptions{})
	harness.SetPodStatus(t, cp.Client, p5, func(s *corev1.PodStatus) { s.Phase = corev1.PodRunning })

	startWatcher(t, cp, n, cfg, "w2")
	harness.Eventually(t, 15*time.Second, "changes stored", func() bool {
		created := lastPod(t, n.JS, subject.Pod("e2e", "default", "new"))
		gone := lastPod(t, n.JS, subject.Pod("e2e", "default", "p-0"))
		running := lastPod(t, n.JS, subject.Pod("e2e", "default", "p-5"))
		return created != nil && gone != nil && gone.Op == events.OpDelete && running != nil && running.Phase == "Running"
	})
	// Give the restarted watcher time to (wrongly) republish anything else:
	// a marker change after everything else must be the only other message.
	harness.CreatePod(t, cp.Client, harness.Pod("default", "marker", ""))
	harness.Eventually(t, 10*time.Second, "marker", func() bool {
		return lastPod(t, n.JS, subject.Pod("e2e", "default", "marker")) != nil
	})
	if got := kubeLastSeq(t, n) - before; got != 5 {
		t.Fatalf("%d messages stored after restart, want exactly 5 (new, tombstone, status change, the node's departure, marker)", got)
	}
	// The restarted watcher carried the departure total on from KUBE (0)
	// and counted p-0's deletion while it was away, once.
	if s := lastNode(t, n.JS, subject.Node("e2e", "worker-1")); s == nil || s.Pods != 20 || s.Departed != 1 || s.DepartedEvicted != 0 {
		t.Fatalf("node state %+v, want 20 pods and 1 departure", s)
	}
}

// TestWatcherSurvivesNATSOutage stops NATS for a few seconds while the cluster
// changes; once NATS is back, KUBE holds every final state.
func TestWatcherSurvivesNATSOutage(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	ctx := context.Background()
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	w := startWatcher(t, cp, n, harness.WriteConfig(t, watcherConfig), "w1")
	harness.Eventually(t, 15*time.Second, "node in KUBE", func() bool {
		return lastNode(t, n.JS, subject.Node("e2e", "worker-1")) != nil
	})

	n.Stop()
	for i := 0; i < 10; i++ {
		harness.CreatePod(t, cp.Client, harness.Pod("default", fmt.Sprintf("during-%d", i), node.Name))
	}
	pod, _ := cp.Client.CoreV1().Pods("default").Get(ctx, "during-3", metav1.GetOptions{})
	harness.SetPodStatus(t, cp.Client, pod, func(s *corev1.PodStatus) { s.Phase, s.Reason = corev1.PodFailed, "Evicted" })
	harness.Eventually(t, 10*time.Second, "watcher /readyz to fail while NATS is down", func() bool {
		return httpStatus(w.HealthURL+"/readyz") == 503
	})
	time.Sleep(3 * time.Second) // the outage itself: NATS stays down a while longer
	if w.Exited() {
		t.Fatalf("watcher exited during the NATS outage:\n%s", w.Logs())
	}
	n.Restart(t)

	harness.Eventually(t, 30*time.Second, "final states after the outage", func() bool {
		for i := 0; i < 10; i++ {
			if lastPod(t, n.JS, subject.Pod("e2e", "default", fmt.Sprintf("during-%d", i))) == nil {
				return false
			}
		}
		evicted := lastPod(t, n.JS, subject.Pod("e2e", "default", "during-3"))
		s := lastNode(t, n.JS, subject.Node("e2e", "worker-1"))
		return evicted.Reason == "Evicted" && s != nil && s.Pods == 9
	})
	if w.Exited() || !strings.Contains(w.Logs(), "nats disconnected") {
		t.Fatalf("watcher did not ride out the outage (exited=%v)", w.Exited())
	}
	harness.Eventually(t, 10*time.Second, "watcher ready again", w.Ready)
}

// TestWatcherGhostPodAfterTimedOutPublishes is issue 19's ghost pod: with
// NATS down, a pod is created and deleted while every publish of it fails
// (refused at once: the watcher's connection has no reconnect buffer). After
// NATS is back, KUBE must hold the pod's tombstone and the node's count must
// match the API, whatever was stored in between.
func TestWatcherGhostPodAfterTimedOutPublishes(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreatePod(t, cp.Client, harness.Pod("default", "stays", node.Name))
	w := startWatcher(t, cp, n, harness.WriteConfig(t, watcherConfig+`
watcher:
  publishTimeout: 1s
`), "w1")
	nodeSubj := subject.Node("e2e", node.Name)
	harness.Eventually(t, 15*time.Second, "node with 1 pod in KUBE", func() bool {
		s := lastNode(t, n.JS, nodeSubj)
		return s != nil && s.Pods == 1
	})

	n.Stop()
	errorsBefore := w.Metric(`opswire_watcher_publish_errors_total{kind="pod"}`)
	harness.CreatePod(t, cp.Client, harness.Pod("default", "ghost", node.Name))
	harness.Eventually(t, 20*time.Second, "the ghost's publish to time out", func() bool {
		return w.Metric(`opswire_watcher_publish_errors_total{kind="pod"}`) > errorsBefore
	})
	deletePodNow(t, cp, "default", "ghost")
	errorsAfterDelete := w.Metric(`opswire_watcher_publish_errors_total{kind="pod"}`)
	harness.Eventually(t, 20*time.Second, "a publish after the deletion to time out too", func() bool {
		return w.Metric(`opswire_watcher_publish_errors_total{kind="pod"}`) > errorsAfterDelete
	})
	n.Restart(t)

	harness.Eventually(t, 30*time.Second, "the ghost's tombstone and the API's count in KUBE", func() bool {
		ghost := lastPod(t, n.JS, subject.Pod("e2e", "default", "ghost"))
		s := lastNode(t, n.JS, nodeSubj)
		return ghost != nil && ghost.Op == events.OpDelete && ghost.UID != "" && s != nil && s.Pods == apiPodCount(t, cp, node.Name)
	})
	// Converged, and stays so: nothing still in flight overwrites it.
	harness.Never(t, 3*time.Second, "KUBE to diverge again", func() bool {
		ghost := lastPod(t, n.JS, subject.Pod("e2e", "default", "ghost"))
		s := lastNode(t, n.JS, nodeSubj)
		return ghost == nil || ghost.Op != events.OpDelete || s == nil || s.Pods != 1
	})
}

// apiPodCount counts the pods bound to node that occupy it, from the API.
func apiPodCount(t *testing.T, cp *harness.ControlPlane, node string) int {
	t.Helper()
	l, err := cp.Client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	c := 0
	for _, p := range l.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			c++
		}
	}
	return c
}

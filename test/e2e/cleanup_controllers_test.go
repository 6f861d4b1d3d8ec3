package e2e

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCleanupBesideRealControllers runs opswire-cleanup (and the watcher)
// beside the real kube-controller-manager and kube-scheduler, whose
// controllers own, count and remove the same pods cleanup acts on: the
// DaemonSet controller replaces a node's agent as soon as the old pod is gone
// from the API, the Job controller counts a failed pod through its
// job-tracking finalizer, PodGC force-deletes Terminating pods on a node that
// is not Ready and tainted out-of-service, and the node lifecycle controller
// turns a silent node Unknown. Each step shows that cleanup removes nothing
// one of them still holds, and does not fight them over what they remove.
func TestCleanupBesideRealControllers(t *testing.T) {
	started := time.Now()
	cp := harness.StartControlPlane(t)
	c := cp.Client
	ctx := context.Background()
	harness.CreateNamespace(t, c, "apps")
	// Six nodes: with the two this test makes unreachable not Ready, 2 of 6
	// stay at the mass-failure brake's third (it engages above it).
	for name, pool := range map[string]string{
		"agent-ready": "agents", "agent-lost": "agents", "job-node": "jobs", "db-node": "db", "spare-1": "spare", "spare-2": "spare",
	} {
		harness.CreateNode(t, c, harness.Node(name, map[string]string{"pool": pool}))
	}
	ctrl := cp.StartControllers(t, harness.ControllerOptions{
		// The scheduler binds the controllers' pods: an unscheduled
		// Terminating pod runs nowhere, and cleanup (and PodGC) rightly
		// release it, which would prove nothing here.
		Scheduler:              true,
		NodeMonitorPeriod:      time.Second,
		NodeMonitorGracePeriod: 5 * time.Second,
		NodeEvictionRate:       10, // taint an unreachable node at once, not 10 s after the previous one
	})

	n := harness.StartNATS(t)
	cfg := harness.WriteConfig(t, cleanupConfig())
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	// Every request cleanup sends goes through the proxy: what it wrote to
	// a pod is counted at the source.
	proxy := harness.StartAPIProxy(t, cp)
	cleanup := startCleanup(t, n, cfg, proxy.Kubeconfig(t, cleanupKubeconfig(t, cp)), "a")
	harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", map[string]*harness.Process{"a": cleanup})

	createWorkloads(t, cp)
	agents := map[string]*corev1.Pod{} // node -> the DaemonSet's pod there
	harness.Eventually(t, 60*time.Second, "a DaemonSet pod bound to agent-ready and to agent-lost, the Job's pod and db-0, db-1 bound", func() bool {
		clear(agents)
		for _, p := range podsWith(t, cp, "app=agent") {
			if p.Spec.NodeName != "" {
				agents[p.Spec.NodeName] = &p
			}
		}
		jobs, dbs := podsWith(t, cp, "app=migrate"), podsWith(t, cp, "app=db")
		return len(agents) == 2 && len(jobs) == 1 && jobs[0].Spec.NodeName == "job-node" &&
			len(dbs) == 2 && dbs[0].Spec.NodeName == "db-node" && dbs[1].Spec.NodeName == "db-node"
	})
	t.Logf("control plane, controllers, NATS, watcher, cleanup and workloads up after %v", time.Since(started).Round(time.Millisecond))

	t.Run("a DaemonSet pod stuck Terminating is held on a Ready and on an Unknown node; a plain one beside it is force-deleted", func(t *testing.T) {
		// agent-lost first goes silent: the real node lifecycle controller
		// turns it Unknown and taints it unreachable (the DaemonSet's pods
		// tolerate that, as node agents do, so nothing evicts them).
		harness.MakeUnreachable(t, c, "agent-lost")
		harness.Eventually(t, 30*time.Second, "agent-lost Ready=Unknown and tainted unreachable by the node lifecycle controller", func() bool {
			node := harness.GetNode(t, cp.Client, "agent-lost")
			return harness.NodeReady(node) == corev1.ConditionUnknown && nodeHasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
		})
		plain := map[string]*corev1.Pod{}
		for _, node := range []string{"agent-ready", "agent-lost"} {
			plain[node] = harness.CreatePod(t, c, harness.Pod("apps", "plain-"+node, node))
		}
		var deadline time.Time
		for _, node := range []string{"agent-ready", "agent-lost"} {
			deleteGracefully(t, cp, "apps", plain[node].Name)
			deadline = deleteGracefully(t, cp, "apps", agents[node].Name).Add(4 * time.Second) // terminatingTimeout
		}
		// The controls: pods without an owner, stuck on the same nodes,
		// are force-deleted at the deadline.
		harness.Eventually(t, time.Until(deadline)+10*time.Second, "the plain pods on agent-ready and agent-lost force-deleted", func() bool {
			return !uidExists(t, cp, plain["agent-ready"]) && !uidExists(t, cp, plain["agent-lost"])
		})
		for _, node := range []string{"agent-ready", "agent-lost"} {
			if d := decision(t, ops.WaitFor(t, 5*time.Second, "forcedeleted "+plain[node].Name, outcomeOf(plain[node], "forcedeleted"))); d.Reason != "StuckTerminating" {
				t.Fatalf("%s: %+v", plain[node].Name, d)
			}
		}
		// Held, the old agent keeps the DaemonSet controller from starting a
		// second one on its node: it creates a node's pod only when none
		// exists there, a Terminating one included.
		harness.Never(t, time.Until(deadline.Add(15*time.Second)), "a DaemonSet pod force-deleted, or a second agent on its node (15 s past the deadline)", func() bool {
			for _, node := range []string{"agent-ready", "agent-lost"} {
				on := podsOn(podsWith(t, cp, "app=agent"), node)
				if !uidExists(t, cp, agents[node]) || len(on) != 1 {
					t.Logf("on %s: %s gone: %v; the DaemonSet's pods there now: %v (cleanup's forcedeleted outcomes: %d)",
						node, agents[node].Name, !uidExists(t, cp, agents[node]), podNames(on), ops.Count(outcomeOf(agents[node], "forcedeleted")))
					return true
				}
			}
			return false
		})
		for node, reason := range map[string]string{"agent-ready": "StatefulSetOnReadyNode", "agent-lost": "NodeNotConfirmedDown"} {
			d := decision(t, ops.WaitFor(t, 10*time.Second, "skip of the DaemonSet pod on "+node, outcomeOf(agents[node], "skipped")))
			if d.Reason != reason || d.Owner == nil || d.Owner.Kind != "DaemonSet" || !strings.Contains(d.Message, "DaemonSet agent pod") {
				t.Fatalf("DaemonSet pod on %s: %+v, want skipped %s", node, d, reason)
			}
		}
		for _, node := range []string{"agent-ready", "agent-lost"} {
			if got := ops.Count(outcomeOf(agents[node], "forcedeleted")); got != 0 {
				t.Fatalf("DaemonSet pod on %s: %d forcedeleted outcomes", node, got)
			}
		}
	})

	t.Run("an evicted Job pod is deleted, the Job controller counts it and removes its own finalizer", func(t *testing.T) {
		pod := podsWith(t, cp, "app=migrate")[0]
		if !slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer) {
			t.Fatalf("the Job's pod carries no %s: %v", batchv1.JobTrackingFinalizer, pod.Finalizers)
		}
		evict(t, cp, &pod)
		harness.Eventually(t, 20*time.Second, "the evicted Job pod gone", func() bool { return !uidExists(t, cp, &pod) })
		// Which comes first is a race between the two: cleanup's DELETE
		// while the finalizer is on (deletionrequested: the pod stays
		// Terminating until the Job controller lets go) or after the Job
		// controller removed it (deleted). Both are right; neither may
		// lose the failure.
		m := ops.WaitFor(t, 5*time.Second, "cleanup's outcome for the Job pod", func(m harness.Msg) bool {
			return outcomeOf(&pod, "deleted")(m) || outcomeOf(&pod, "deletionrequested")(m)
		})
		t.Logf("cleanup's outcome: %s", decision(t, m).Verb)
		harness.Eventually(t, 20*time.Second, "the Job controller counts the evicted pod (status.failed 1)", func() bool {
			job, err := c.BatchV1().Jobs("apps").Get(ctx, "migrate", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if job.Status.Failed > 1 {
				t.Fatalf("status.failed %d: one pod failed", job.Status.Failed)
			}
			return job.Status.Failed == 1
		})
		// cleanup's removeFinalizers is false: it read the pod and deleted
		// it (again after a conflict, if the Job controller changed the pod
		// between its GET and its DELETE), and never wrote to it otherwise:
		// the finalizer went with the Job controller's own PATCH.
		var deletes int
		for _, r := range proxy.Requests(func(r harness.APIRequest) bool {
			return strings.HasPrefix(r.Path, "/api/v1/namespaces/apps/pods/"+pod.Name)
		}) {
			switch {
			case r.Method == http.MethodDelete && r.Path == "/api/v1/namespaces/apps/pods/"+pod.Name:
				deletes++
			case r.Method != http.MethodGet:
				t.Fatalf("cleanup sent %s %s: it must not write to a pod but to delete it", r.Method, r.Path)
			}
		}
		if deletes == 0 {
			t.Fatal("cleanup sent no DELETE of the Job pod")
		}
		t.Logf("cleanup's DELETEs of the Job pod: %d", deletes)
	})

	t.Run("a StatefulSet pod on an unreachable node tainted out-of-service is removed once, by PodGC or cleanup, without a fight; on a Ready node the taint releases nothing", func(t *testing.T) {
		dbs := map[string]*corev1.Pod{}
		for _, p := range podsWith(t, cp, "app=db") {
			dbs[p.Name] = &p
		}
		// db-0's deadline passes while its node is held Unknown: cleanup
		// acts the moment the taint comes. db-1's grace period outlasts
		// PodGC's 20 s period: PodGC's pass comes first. (The template's
		// 120 s terminationGracePeriodSeconds keeps the taint eviction
		// controller's own DELETE from shortening it.)
		deadline0 := deleteGracefully(t, cp, "apps", "db-0").Add(4 * time.Second)
		grace := int64(90)
		if err := c.CoreV1().Pods("apps").Delete(ctx, "db-1", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
			t.Fatal(err)
		}
		deadline1 := time.Now().Add(time.Duration(grace)*time.Second + 4*time.Second)
		harness.MakeUnreachable(t, c, "db-node")
		harness.Eventually(t, 30*time.Second, "db-node Ready=Unknown and tainted unreachable", func() bool {
			node := harness.GetNode(t, cp.Client, "db-node")
			return harness.NodeReady(node) == corev1.ConditionUnknown && nodeHasTaint(node, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
		})
		// Decided at db-0's deadline or at the node's change to Unknown,
		// whichever is later.
		harness.Eventually(t, max(time.Until(deadline0), 0)+10*time.Second, "db-0 held on the Unknown node (NodeNotConfirmedDown)", func() bool {
			return ops.Count(func(m harness.Msg) bool {
				return outcomeOf(dbs["db-0"], "skipped")(m) && decision(t, m).Reason == "NodeNotConfirmedDown"
			}) == 1
		})
		if !uidExists(t, cp, dbs["db-0"]) {
			t.Fatal("db-0 removed while its node was only Unknown")
		}
		outOfService := corev1.Taint{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}
		// The contrast: the same taint on a node that is Ready (back from a
		// shutdown, its taint not yet removed) releases nothing, for PodGC as
		// for cleanup. A pod mounting a claim, stuck on spare-1, deleted
		// right before the taint so that cleanup's first decision on it
		// sees the taint; tainted before db-node, so the PodGC pass that
		// removes db-1 below has seen it too.
		claim := harness.Pod("apps", "claim-spare", "spare-1")
		claim.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "spare-data"}}}}
		claimPod := harness.CreatePod(t, c, claim)
		deadlineClaim := deleteGracefully(t, cp, "apps", claim.Name).Add(4 * time.Second)
		taintNode(t, cp, "spare-1", outOfService)
		tainted := time.Now()
		taintNode(t, cp, "db-node", outOfService)
		harness.Eventually(t, 30*time.Second, "db-0 and db-1 gone (PodGC looks every 20 s)", func() bool {
			return !uidExists(t, cp, dbs["db-0"]) && !uidExists(t, cp, dbs["db-1"])
		})
		t.Logf("db-0 and db-1 gone %v after the taint", time.Since(tainted).Round(time.Millisecond))
		if time.Now().After(deadline1) {
			t.Fatalf("db-1 outlived its cleanup deadline: the step did not show PodGC's removal")
		}
		// Let a late outcome arrive before counting: cleanup publishes its
		// outcome within moments of its write.
		harness.Eventually(t, 5*time.Second, "cleanup's outcome for db-0, or PodGC's removal of it", func() bool {
			return ops.Count(outcomeOf(dbs["db-0"], "forcedeleted")) == 1 || podGCRemoved(t, ctrl, "db-0")
		})
		for _, name := range []string{"db-0", "db-1"} {
			forced, failed := ops.Count(outcomeOf(dbs[name], "forcedeleted")), ops.Count(outcomeOf(dbs[name], "failed"))
			byPodGC := podGCRemoved(t, ctrl, name)
			t.Logf("%s: cleanup forcedeleted %d, PodGC force-deleted it: %v", name, forced, byPodGC)
			if forced > 1 || failed != 0 {
				t.Fatalf("%s: %d forcedeleted and %d failed outcomes, want at most one forcedeleted and no failure:\n%s", name, forced, failed, ops.Describe())
			}
			if forced == 0 && !byPodGC {
				t.Fatalf("%s gone, but neither cleanup nor PodGC says it removed it", name)
			}
		}
		if ops.Count(outcomeOf(dbs["db-1"], "forcedeleted")) != 0 {
			t.Fatal("cleanup force-deleted db-1 before its deadline")
		}
		if !podGCRemoved(t, ctrl, "db-1") {
			t.Fatal("PodGC did not remove db-1")
		}

		harness.Eventually(t, time.Until(deadlineClaim)+5*time.Second, "cleanup's decision on the claim pod on the Ready tainted node", func() bool {
			return ops.Count(outcomeOf(claimPod, "skipped")) > 0 || !uidExists(t, cp, claimPod)
		})
		if !uidExists(t, cp, claimPod) || podGCRemoved(t, ctrl, claim.Name) || ops.Count(outcomeOf(claimPod, "forcedeleted")) != 0 {
			t.Fatalf("the claim pod on a Ready node tainted out-of-service was removed (cleanup forcedeleted %d, PodGC: %v)",
				ops.Count(outcomeOf(claimPod, "forcedeleted")), podGCRemoved(t, ctrl, claim.Name))
		}
		d := decision(t, ops.WaitFor(t, time.Second, "cleanup's skip of the claim pod", outcomeOf(claimPod, "skipped")))
		if d.Reason != "StatefulSetOnReadyNode" || !strings.Contains(d.Message, events.TaintOutOfService) {
			t.Fatalf("claim pod on the Ready out-of-service node: %+v, want skipped StatefulSetOnReadyNode naming the taint", d)
		}
	})

	if cleanup.Exited() {
		t.Fatalf("opswire-cleanup exited:\n%s", cleanup.Logs())
	}
	t.Logf("whole test %v", time.Since(started).Round(time.Millisecond))
}

// createWorkloads creates the real controllers' workloads, each pinned by
// nodeSelector to its nodes: a DaemonSet on the two agent nodes, a Job on
// job-node and a two-pod StatefulSet on db-node.
func createWorkloads(t *testing.T, cp *harness.ControlPlane) {
	t.Helper()
	ctx := context.Background()
	template := func(app, pool string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{
				RestartPolicy: restart,
				NodeSelector:  map[string]string{"pool": pool},
				Containers:    []corev1.Container{{Name: app, Image: "registry.invalid/" + app + ":1"}},
			},
		}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent", "agents", corev1.RestartPolicyAlways)},
	}
	if _, err := cp.Client.AppsV1().DaemonSets("apps").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	backoff := int32(6) // the evicted pod is one failure of many allowed: the Job goes on
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "migrate"},
		Spec:       batchv1.JobSpec{BackoffLimit: &backoff, Template: template("migrate", "jobs", corev1.RestartPolicyNever)},
	}
	if _, err := cp.Client.BatchV1().Jobs("apps").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	replicas, grace := int32(2), int64(120)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: "db", Selector: selector("db"),
			PodManagementPolicy: appsv1.ParallelPodManagement, // both pods at once: db-1 does not wait for db-0 to be Ready
			Template:            template("db", "db", corev1.RestartPolicyAlways),
		},
	}
	sts.Spec.Template.Spec.TerminationGracePeriodSeconds = &grace
	if _, err := cp.Client.AppsV1().StatefulSets("apps").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podsWith lists the pods of namespace apps matching a label selector,
// Terminating ones included, sorted by name.
func podsWith(t *testing.T, cp *harness.ControlPlane, selector string) []corev1.Pod {
	t.Helper()
	l, err := cp.Client.CoreV1().Pods("apps").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return l.Items
}

func podNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+" (uid "+string(p.UID)+")")
	}
	return out
}

func podsOn(pods []corev1.Pod, node string) []corev1.Pod {
	return slices.DeleteFunc(pods, func(p corev1.Pod) bool { return p.Spec.NodeName != node })
}

// uidExists reports whether the pod itself is still there: a controller may
// have created another under the same name (the StatefulSet controller does).
func uidExists(t *testing.T, cp *harness.ControlPlane, p *corev1.Pod) bool {
	t.Helper()
	got, err := cp.Client.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	if err != nil {
		t.Fatalf("get %s/%s: %v", p.Namespace, p.Name, err)
	}
	return got.UID == p.UID
}

// outcomeOf matches cleanup's outcome with the verb about that pod (by UID,
// in the message id: the name may come back with another pod).
func outcomeOf(p *corev1.Pod, verb string) func(harness.Msg) bool {
	prefix := "cleanup/" + string(p.UID) + "/" + verb
	return func(m harness.Msg) bool {
		return isOutcome(m) && (m.ID == prefix || strings.HasPrefix(m.ID, prefix+"/"))
	}
}

// podGCRemoved reports whether kube-controller-manager's log shows PodGC
// force-deleting apps/<name> (it logs every force deletion at level 0).
func podGCRemoved(t *testing.T, ctrl *harness.Controllers, name string) bool {
	t.Helper()
	b, err := os.ReadFile(ctrl.ManagerLog)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), `"PodGC is force deleting Pod" pod="apps/`+name+`"`)
}

func nodeHasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCleanupLeavesJobTrackingFinalizer: a pod of a Job with a
// podFailurePolicy (podReplacementPolicy Failed) is stuck Terminating on a
// node the real node lifecycle controller turned Unknown. The Job
// controller counts such a pod only once its phase is Failed, so it keeps
// its batch.kubernetes.io/job-tracking finalizer. Cleanup, with
// removeFinalizers, never strips it: it reports HasFinalizers and sends the
// pod nothing but GETs. Once a person taints the node out-of-service, the
// real PodGC marks the pod Failed and deletes it, the Job controller counts
// it (status.failed 1) and removes its finalizer, and the pod is gone.
func TestCleanupLeavesJobTrackingFinalizer(t *testing.T) {
	started := time.Now()
	cp := harness.StartControlPlane(t)
	c := cp.Client
	ctx := context.Background()
	harness.CreateNamespace(t, c, "apps")
	// Four nodes: one Unknown stays under the mass-failure brake's third.
	for name, pool := range map[string]string{"job-node": "jobs", "spare-1": "spare", "spare-2": "spare", "spare-3": "spare"} {
		harness.CreateNode(t, c, harness.Node(name, map[string]string{"pool": pool}))
	}
	ctrl := cp.StartControllers(t, harness.ControllerOptions{
		Controllers:            []string{"job-controller", "pod-garbage-collector-controller", "node-lifecycle-controller"},
		Scheduler:              true,
		NodeMonitorPeriod:      time.Second,
		NodeMonitorGracePeriod: 5 * time.Second,
	})
	n := harness.StartNATS(t)
	cfg := harness.WriteConfig(t, cleanupConfig("removeFinalizers: true"))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	proxy := harness.StartAPIProxy(t, cp)
	cleanup := startCleanup(t, n, cfg, proxy.Kubeconfig(t, cleanupKubeconfig(t, cp)), "a")
	harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", map[string]*harness.Process{"a": cleanup})

	backoff := int32(6)
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "migrate"},
		Spec: batchv1.JobSpec{
			BackoffLimit: &backoff,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{{
				Action: batchv1.PodFailurePolicyActionFailJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
					Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}},
			}}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "migrate"}},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					NodeSelector:  map[string]string{"pool": "jobs"},
					Containers:    []corev1.Container{{Name: "migrate", Image: "registry.invalid/migrate:1"}},
				},
			},
		},
	}
	created, err := c.BatchV1().Jobs("apps").Create(ctx, job, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p := created.Spec.PodReplacementPolicy; p == nil || *p != batchv1.Failed {
		t.Fatalf("podReplacementPolicy %v, want Failed (the default with a podFailurePolicy)", p)
	}
	var pod corev1.Pod
	harness.Eventually(t, 30*time.Second, "the Job's pod bound to job-node", func() bool {
		pods := podsWith(t, cp, "app=migrate")
		if len(pods) != 1 || pods[0].Spec.NodeName != "job-node" {
			return false
		}
		pod = pods[0]
		return true
	})
	if !slices.Contains(pod.Finalizers, batchv1.JobTrackingFinalizer) {
		t.Fatalf("the Job's pod carries no %s: %v", batchv1.JobTrackingFinalizer, pod.Finalizers)
	}
	harness.MakeUnreachable(t, c, "job-node")
	harness.Eventually(t, 30*time.Second, "job-node Ready=Unknown (node lifecycle controller)", func() bool {
		return harness.NodeReady(harness.GetNode(t, cp.Client, "job-node")) == corev1.ConditionUnknown
	})
	deadline := deleteGracefully(t, cp, "apps", pod.Name).Add(4 * time.Second) // terminatingTimeout

	d := decision(t, ops.WaitFor(t, time.Until(deadline)+10*time.Second, "cleanup's skip of the Job pod", outcomeOf(&pod, "skipped")))
	if d.Reason != "HasFinalizers" || !strings.Contains(d.Message, batchv1.JobTrackingFinalizer) {
		t.Fatalf("Job pod: %+v, want skipped HasFinalizers naming %s", d, batchv1.JobTrackingFinalizer)
	}
	harness.Never(t, 10*time.Second, "the Job pod's job-tracking finalizer removed, or the pod gone, while its node is only Unknown", func() bool {
		live, err := c.CoreV1().Pods("apps").Get(ctx, pod.Name, metav1.GetOptions{})
		return err != nil || live.UID != pod.UID || !slices.Contains(live.Finalizers, batchv1.JobTrackingFinalizer)
	})

	taintNode(t, cp, "job-node", corev1.Taint{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
	tainted := time.Now()
	harness.Eventually(t, 45*time.Second, "the Job pod gone (PodGC looks every 20 s)", func() bool { return !uidExists(t, cp, &pod) })
	t.Logf("the Job pod gone %v after the taint", time.Since(tainted).Round(time.Millisecond))
	if !podGCRemoved(t, ctrl, pod.Name) {
		t.Fatal("PodGC did not mark and delete the Job pod")
	}
	harness.Eventually(t, 20*time.Second, "the Job controller counts the pod (status.failed 1)", func() bool {
		j, err := c.BatchV1().Jobs("apps").Get(ctx, "migrate", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return j.Status.Failed == 1
	})
	// Cleanup read the pod, and wrote nothing to it.
	for _, r := range proxy.Requests(func(r harness.APIRequest) bool {
		return strings.HasPrefix(r.Path, "/api/v1/namespaces/apps/pods/"+pod.Name)
	}) {
		if r.Method != http.MethodGet {
			t.Fatalf("cleanup sent %s %s to a pod the Job controller still tracks", r.Method, r.Path)
		}
	}
	if got := ops.Count(func(m harness.Msg) bool { return outcomeOf(&pod, "forcedeleted")(m) || outcomeOf(&pod, "failed")(m) }); got != 0 {
		t.Fatalf("cleanup's outcomes for the Job pod: %s", ops.Describe())
	}
	if cleanup.Exited() {
		t.Fatalf("opswire-cleanup exited:\n%s", cleanup.Logs())
	}
	t.Logf("whole test %v", time.Since(started).Round(time.Millisecond))
}

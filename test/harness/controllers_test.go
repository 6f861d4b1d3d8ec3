package harness

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestRealControllersActOnFakeNodes runs kube-controller-manager and
// kube-scheduler against fake nodes (no kubelet) and checks that they do
// what they do in production: workloads get their pods, the garbage
// collector and PodGC delete pods, the node lifecycle controller turns a
// node whose Lease stops Unknown and taints it, while nodes whose Leases
// the harness renews stay Ready throughout.
func TestRealControllersActOnFakeNodes(t *testing.T) {
	cp := StartControlPlane(t)
	c := cp.Client
	ctx := context.Background()
	// PodGC quarantines a node it does not know for 40 s and looks every
	// 20 s (constants of the binary; no flag changes them). Created before
	// the controllers, the orphan is quarantined by PodGC's first pass, at
	// its start, and deleted 40-60 s later while the other checks run.
	CreatePod(t, c, Pod("default", "orphan", "node-gone"))
	nodes := []string{"alive-1", "alive-2", "lost-1"}
	for _, n := range nodes {
		CreateNode(t, c, Node(n, map[string]string{"pool": "workers"}))
	}
	// Two nodes that never post a status (no Ready condition): the
	// controller gives them the startup grace period from their creation,
	// then sets them Unknown, unless their Lease is renewed. A zone of
	// their own: the controller counts a node without a Ready condition as
	// not Ready in its zone's health, and with 3 of the 5 not Ready the
	// zone would be in partial disruption, where a cluster of up to 50
	// nodes gets no NoExecute taint.
	z2 := map[string]string{corev1.LabelTopologyZone: "z2"}
	silent := Node("never-ready-silent", z2)
	silent.Annotations = map[string]string{UnreachableAnnotation: "true"}
	for _, n := range []*corev1.Node{Node("never-ready", z2), silent} {
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	CreateNamespace(t, c, "apps")
	started := time.Now()
	cp.StartControllers(t, ControllerOptions{
		Scheduler:                true,
		NodeMonitorPeriod:        time.Second,
		NodeMonitorGracePeriod:   5 * time.Second,
		NodeStartupGracePeriod:   5 * time.Second,
		NodeEvictionRate:         10,
		TerminatedPodGCThreshold: 1,
	})
	t.Logf("controllers serving after %v", time.Since(started).Round(time.Millisecond))

	t.Run("DaemonSet gets one pod per node, bound to it", func(t *testing.T) {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "agent"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
				Template: podTemplate("agent", corev1.RestartPolicyAlways),
			},
		}
		// Tolerates everything, as node agents do: the pod on lost-1 stays
		// whatever the later subtests do to that node. The nodes without a
		// status have no room for pods (allocatable pods 0): left out.
		ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		ds.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "workers"}
		if _, err := c.AppsV1().DaemonSets("apps").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var bound []string
		Eventually(t, 30*time.Second, "a pod bound to each node", func() bool {
			bound = nil
			for _, p := range listPods(t, c, "apps", "app=agent") {
				bound = append(bound, p.Spec.NodeName)
			}
			slices.Sort(bound)
			return slices.Equal(bound, nodes)
		})
	})

	t.Run("Job gets its pod", func(t *testing.T) {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "migrate"},
			Spec:       batchv1.JobSpec{Template: podTemplate("migrate", corev1.RestartPolicyNever)},
		}
		if _, err := c.BatchV1().Jobs("apps").Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 30*time.Second, "the Job's pod", func() bool {
			return len(listPods(t, c, "apps", batchv1.JobNameLabel+"=migrate")) == 1
		})
	})

	t.Run("garbage collector deletes a pod whose owner is deleted", func(t *testing.T) {
		owner, err := c.CoreV1().ConfigMaps("apps").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := Pod("apps", "owned", "alive-1")
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}}
		CreatePod(t, c, p)
		if err := c.CoreV1().ConfigMaps("apps").Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// The pod is bound and no kubelet confirms its end: deleted means
		// terminating (deletionTimestamp set), as a kubelet would then see it.
		Eventually(t, 30*time.Second, "the owned pod deleted", func() bool {
			got, err := c.CoreV1().Pods("apps").Get(ctx, "owned", metav1.GetOptions{})
			return apierrors.IsNotFound(err) || (err == nil && got.DeletionTimestamp != nil)
		})
	})

	t.Run("service accounts get tokens signed with the API server's key and the root CA", func(t *testing.T) {
		Eventually(t, 30*time.Second, "ServiceAccount default/default", func() bool {
			_, err := c.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil
		})
		// --use-service-account-credentials: each controller acts as its own
		// ServiceAccount, under the API server's RBAC bootstrap roles.
		if _, err := c.CoreV1().ServiceAccounts("kube-system").Get(ctx, "node-controller", metav1.GetOptions{}); err != nil {
			t.Fatalf("the node lifecycle controller's ServiceAccount: %v", err)
		}
		ca, err := os.ReadFile(cp.RootCAFile(t))
		if err != nil {
			t.Fatal(err)
		}
		Eventually(t, 30*time.Second, "kube-root-ca.crt published with the root CA", func() bool {
			cm, err := c.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
			return err == nil && cm.Data["ca.crt"] == string(ca)
		})
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default-token",
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type: corev1.SecretTypeServiceAccountToken,
		}
		if _, err := c.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var data map[string][]byte
		Eventually(t, 30*time.Second, "the token Secret filled", func() bool {
			s, err := c.CoreV1().Secrets("default").Get(ctx, secret.Name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			data = s.Data
			return len(data[corev1.ServiceAccountTokenKey]) > 0
		})
		if !bytes.Equal(data[corev1.ServiceAccountRootCAKey], ca) {
			t.Fatalf("token Secret's ca.crt is not the root CA:\n%s", data[corev1.ServiceAccountRootCAKey])
		}
		// The API server verifies the token with sa.pub: the pair matches.
		sa := kubernetes.NewForConfigOrDie(&rest.Config{Host: cp.URL, BearerToken: string(data[corev1.ServiceAccountTokenKey]),
			TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
		review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the token, over TLS verified with the root CA: %v", err)
		}
		if u := review.Status.UserInfo.Username; u != "system:serviceaccount:default:default" {
			t.Fatalf("the token authenticates as %q", u)
		}
	})

	t.Run("node whose Lease stops goes Unknown and unreachable, renewed ones stay Ready", func(t *testing.T) {
		lost := time.Now()
		MakeUnreachable(t, c, "lost-1")
		Eventually(t, 30*time.Second, "lost-1 Ready=Unknown and tainted unreachable (NoSchedule and NoExecute)", func() bool {
			n := GetNode(t, c, "lost-1")
			return NodeReady(n) == corev1.ConditionUnknown &&
				hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoSchedule) &&
				hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute)
		})
		t.Logf("lost-1 unreachable %v after MakeUnreachable (grace period 5s)", time.Since(lost).Round(time.Millisecond))
		if r := readyCondition(GetNode(t, c, "lost-1")); r.Reason != "NodeStatusUnknown" {
			t.Errorf("lost-1's Ready condition: %+v, want the controller's NodeStatusUnknown", r)
		}
		assertHealthy(t, c, "alive-1", "alive-2")

		MakeReachable(t, c, "lost-1")
		Eventually(t, 30*time.Second, "lost-1 Ready again and its taints lifted", func() bool {
			n := GetNode(t, c, "lost-1")
			return NodeReady(n) == corev1.ConditionTrue && len(n.Spec.Taints) == 0
		})
	})

	t.Run("PodGC deletes terminated pods over the threshold, the oldest first", func(t *testing.T) {
		for _, name := range []string{"done-1", "done-2"} {
			SetPodStatus(t, c, CreatePod(t, c, Pod("apps", name, "alive-1")), func(s *corev1.PodStatus) { s.Phase = corev1.PodFailed })
		}
		Eventually(t, 30*time.Second, "done-1 deleted (PodGC looks every 20s)", func() bool { return !PodExists(t, c, "apps", "done-1") })
		if !PodExists(t, c, "apps", "done-2") {
			t.Fatal("done-2 deleted too, with a threshold of 1")
		}
	})

	t.Run("PodGC force-deletes a pod bound to a node that does not exist", func(t *testing.T) {
		Eventually(t, 90*time.Second, "the orphan deleted (40s quarantine, 20s period)", func() bool {
			return !PodExists(t, c, "default", "orphan")
		})
		t.Logf("orphan deleted %v after the controllers started", time.Since(started).Round(time.Second))
	})

	// By now the nodes outlived the grace periods many times over.
	t.Run("nodes whose Leases are renewed stay as their kubelet left them", func(t *testing.T) {
		assertHealthy(t, c, "alive-1", "alive-2", "lost-1")
		if n := GetNode(t, c, "never-ready"); len(n.Status.Conditions) != 0 || len(n.Spec.Taints) != 0 {
			t.Errorf("never-ready, whose Lease is renewed, got conditions %v and taints %v", n.Status.Conditions, n.Spec.Taints)
		}
		n := GetNode(t, c, "never-ready-silent")
		if r := readyCondition(n); r.Status != corev1.ConditionUnknown || r.Reason != "NodeStatusNeverUpdated" ||
			!hasTaint(n, corev1.TaintNodeUnreachable, corev1.TaintEffectNoExecute) {
			t.Errorf("never-ready-silent, without a Lease: Ready %+v, taints %v; want Unknown (NodeStatusNeverUpdated) and unreachable",
				r, n.Spec.Taints)
		}
	})
}

func podTemplate(app string, restart corev1.RestartPolicy) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			RestartPolicy: restart,
			Containers:    []corev1.Container{{Name: app, Image: "registry.invalid/" + app + ":1"}},
		},
	}
}

func listPods(t *testing.T, c kubernetes.Interface, ns, selector string) []corev1.Pod {
	t.Helper()
	l, err := c.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func readyCondition(n *corev1.Node) corev1.NodeCondition {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func hasTaint(n *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// assertHealthy checks nodes are Ready=True (the condition CreateNode
// wrote, never changed by the controller) and untainted.
func assertHealthy(t *testing.T, c kubernetes.Interface, names ...string) {
	t.Helper()
	for _, name := range names {
		n := GetNode(t, c, name)
		if r := readyCondition(n); r.Status != corev1.ConditionTrue || len(n.Spec.Taints) > 0 {
			t.Errorf("%s: Ready %s (%s), taints %v; want Ready and untainted", name, r.Status, r.Reason, n.Spec.Taints)
		}
	}
}

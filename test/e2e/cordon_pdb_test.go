package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/opswire/opswire/test/harness"
)

// TestCordonRealPDBDrainHandedOver: the paced drain as it happens on a real
// cluster, with the real API server's PodDisruptionBudget rules in the
// Eviction API. A PDB (maxUnavailable 1) covers the node's six Running and
// Ready pods; "kubectl drain" evicts all of them at once and retries every
// 429 ("would violate the pod's disruption budget"); "the kubelet" finishes
// an evicted pod's termination 300 ms after it began; and the test plays the
// disruption controller (not part of the harness): it allows one disruption
// while no pod of the budget is disrupted or terminating. So the API server
// itself lets through one eviction at a time, and refuses the others. The
// node opswire cordoned must be handed over at minPods, stay cordoned, and be
// patched exactly twice (the cordon and the handover).
func TestCordonRealPDBDrainHandedOver(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("pdb", nil))
	cfg := harness.WriteConfig(t, pacedDrainConfig(""))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	proxy := harness.StartAPIProxy(t, cp)
	cordon := harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg,
		Kubeconfig: proxy.Kubeconfig(t, cordonRBAC(t, cp, "default")), NATSURL: n.URL, ID: "c1"})
	cordon.WaitReady(t, 60*time.Second)

	const pods = 6
	labels := map[string]string{"app": "pdb-drain"}
	for i := range pods {
		p := harness.Pod("default", fmt.Sprintf("pdb-p%d", i), "pdb")
		p.Labels = labels
		created := harness.CreatePod(t, c, p)
		harness.SetPodStatus(t, c, created, func(s *corev1.PodStatus) {
			s.Phase = corev1.PodRunning
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		})
	}
	ops.WaitFor(t, 10*time.Second, "pdb cordoned", harness.Subject("ops.e2e.cordon.cordoned.pdb"))
	one := intstr.FromInt32(1)
	_, err := c.PolicyV1().PodDisruptionBudgets("default").Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pdb-drain", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); disruptionController(ctx, t, c, "pdb-drain", labels) }()
	var maxTerminating atomic.Int64
	go func() { defer bg.Done(); kubeletFinisher(ctx, c, "pdb", 300*time.Millisecond, &maxTerminating) }()
	defer bg.Wait()
	defer stop()

	// kubectl drain: every pod evicted concurrently, each retried on 429.
	var refused atomic.Int64
	var drain sync.WaitGroup
	errs := make(chan error, pods)
	for i := range pods {
		drain.Add(1)
		go func(name string) {
			defer drain.Done()
			errs <- evictRetrying(ctx, c, name, &refused)
		}(fmt.Sprintf("pdb-p%d", i))
	}
	drain.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	harness.Eventually(t, 20*time.Second, "the drain finished", func() bool {
		list, err := c.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=pdb-drain"})
		return err == nil && len(list.Items) == 0
	})
	if refused.Load() == 0 {
		t.Fatal("no eviction was refused by the budget: the drain was not paced")
	}
	if m := maxTerminating.Load(); m != 1 {
		t.Fatalf("up to %d pods were terminating at once, want 1: the budget did not pace the drain", m)
	}
	t.Logf("the API server refused %d evictions with 429 (the budget); one pod terminating at a time", refused.Load())

	d := waitHandover(t, ops, "pdb")
	if !strings.Contains(d.Reason, "left through the Eviction API") {
		t.Fatalf("handover decision %+v", d)
	}
	harness.Never(t, 5*time.Second, "the drained node uncordoned", func() bool { return !harness.GetNode(t, c, "pdb").Spec.Unschedulable })
	nodeHandedOver(t, c, proxy, "pdb")
	if s := lastNode(t, n.JS, "kube.e2e.node.pdb"); s == nil || s.Departed != pods || s.DepartedEvicted != pods {
		t.Fatalf("KUBE's departures of pdb: %+v", s)
	}
}

// evictRetrying evicts a pod as kubectl drain does: a 429 (the disruption
// budget, or a budget whose status is not current) is retried after 100 ms;
// the pod being gone ends it.
func evictRetrying(ctx context.Context, c kubernetes.Interface, name string, refused *atomic.Int64) error {
	for {
		err := c.PolicyV1().Evictions("default").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsTooManyRequests(err), apierrors.IsConflict(err):
			refused.Add(1)
		case ctx.Err() != nil:
			return nil
		default:
			return fmt.Errorf("evict %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// disruptionController plays kube-controller-manager's disruption
// controller for one budget, simplified for pods nobody recreates: one
// disruption is allowed while no pod of the budget is terminating or listed
// in the budget's disruptedPods (which the Eviction API writes before it
// deletes the pod); otherwise none.
func disruptionController(ctx context.Context, t *testing.T, c kubernetes.Interface, pdbName string, labels map[string]string) {
	sel := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: labels})
	for ctx.Err() == nil {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			pdb, err := c.PolicyV1().PodDisruptionBudgets("default").Get(ctx, pdbName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return err
			}
			exists := map[string]bool{}
			healthy, busy := 0, false
			for _, p := range list.Items {
				exists[p.Name] = true
				if p.DeletionTimestamp != nil {
					busy = true
				} else if _, disrupted := pdb.Status.DisruptedPods[p.Name]; !disrupted {
					healthy++
				}
			}
			disrupted := map[string]metav1.Time{}
			for name, at := range pdb.Status.DisruptedPods {
				if exists[name] {
					busy = true
					disrupted[name] = at
				}
			}
			allowed := int32(1)
			if busy {
				allowed = 0
			}
			pdb.Status = policyv1.PodDisruptionBudgetStatus{
				ObservedGeneration: pdb.Generation, DisruptedPods: disrupted, DisruptionsAllowed: allowed,
				CurrentHealthy: int32(healthy), DesiredHealthy: max(0, int32(healthy)-allowed), ExpectedPods: int32(len(list.Items)),
			}
			_, err = c.PolicyV1().PodDisruptionBudgets("default").UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
			return err
		})
		if err != nil && ctx.Err() == nil {
			t.Errorf("disruption controller: %v", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kubeletFinisher plays the node's kubelet: a pod whose deletion began is
// removed (grace 0) once its containers have had `after` to shut down. It
// records the most pods it saw terminating at once.
func kubeletFinisher(ctx context.Context, c kubernetes.Interface, node string, after time.Duration, maxTerminating *atomic.Int64) {
	seen := map[string]time.Time{}
	zero := int64(0)
	for ctx.Err() == nil {
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err == nil {
			terminating := int64(0)
			for _, p := range list.Items {
				if p.DeletionTimestamp == nil {
					continue
				}
				terminating++
				if first, ok := seen[p.Name]; !ok {
					seen[p.Name] = time.Now()
				} else if time.Since(first) >= after {
					_ = c.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
			if terminating > maxTerminating.Load() {
				maxTerminating.Store(terminating)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

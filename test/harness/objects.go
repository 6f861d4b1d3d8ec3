package harness

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// Node builds a node object with the given labels.
func Node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// Pod builds a pod bound to nodeName (empty: unscheduled) with one container.
func Pod(namespace, name, nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
}

// CreateNode creates the node and writes a kubelet-like status: Ready, 110
// allocatable pods, 100 GiB ephemeral storage.
func CreateNode(t testing.TB, c kubernetes.Interface, n *corev1.Node) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", n.Name, err)
	}
	return SetNodeStatus(t, c, created.Name, func(s *corev1.NodeStatus) {
		res := corev1.ResourceList{
			corev1.ResourcePods:             resource.MustParse("110"),
			corev1.ResourceCPU:              resource.MustParse("8"),
			corev1.ResourceMemory:           resource.MustParse("32Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
		}
		s.Capacity, s.Allocatable = res, res.DeepCopy()
		s.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	})
}

// GetNode reads a node, failing the test when it cannot.
func GetNode(t testing.TB, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node %s: %v", name, err)
	}
	return n
}

// NodeReady is the status of a node's Ready condition ("" when it has none).
func NodeReady(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// UpdateNode changes a node's spec or metadata (a taint, a label, the
// unschedulable flag, as a person or a controller would), retrying on
// conflicts.
func UpdateNode(t testing.TB, c kubernetes.Interface, name string, mutate func(*corev1.Node)) *corev1.Node {
	t.Helper()
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(n)
		out, err = c.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update node %s: %v", name, err)
	}
	return out
}

// SetNodeStatus changes a node's status through the status subresource,
// retrying on conflicts.
func SetNodeStatus(t testing.TB, c kubernetes.Interface, name string, mutate func(*corev1.NodeStatus)) *corev1.Node {
	t.Helper()
	var out *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(&n.Status)
		out, err = c.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
	return out
}

// CreatePod creates a pod.
func CreatePod(t testing.TB, c kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	created, err := c.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
	}
	return created
}

// PodExists reports whether a pod of that name is in the API, failing the
// test on any error other than NotFound.
func PodExists(t testing.TB, c kubernetes.Interface, namespace, name string) bool {
	t.Helper()
	_, err := c.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("get pod %s/%s: %v", namespace, name, err)
	}
	return err == nil
}

// WaitPodGone waits until the API answers NotFound for the pod.
func WaitPodGone(t testing.TB, c kubernetes.Interface, namespace, name string, timeout time.Duration) {
	t.Helper()
	Eventually(t, timeout, namespace+"/"+name+" gone", func() bool {
		_, err := c.CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// SetPodStatus changes a pod's status through the status subresource,
// retrying on conflicts.
func SetPodStatus(t testing.TB, c kubernetes.Interface, p *corev1.Pod, mutate func(*corev1.PodStatus)) *corev1.Pod {
	t.Helper()
	var out *corev1.Pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := c.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(&cur.Status)
		out, err = c.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("pod %s/%s status: %v", p.Namespace, p.Name, err)
	}
	return out
}

// CreateNamespace creates a namespace.
func CreateNamespace(t testing.TB, c kubernetes.Interface, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

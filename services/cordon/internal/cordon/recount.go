package cordon

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

// recountPageSize is the LIST page size of the pod recount.
const recountPageSize = 500

// podCount is what the recount found on a node.
type podCount struct {
	// Pods counts the non-terminated pods, by the same rule as the watcher
	// and the scheduler: bound to the node, not Succeeded or Failed.
	Pods int
	// Evicting counts those being evicted through the Eviction API.
	Evicting int
}

// recountPods counts a node's pods with a paged field-selector LIST.
//
// notOlderThan is the resourceVersion the watcher counted at: the first page
// is then at least as new as the count the decision was made on, and the API
// server answers it from its watch cache. Later pages carry only the
// continue token: it encodes the list's resourceVersion, and the API server
// rejects a continue sent together with resourceVersion or
// resourceVersionMatch, so a node with more pods than one page could
// otherwise never be counted. Without notOlderThan (an older watcher) the
// list is a consistent read. A continue token that expired (410) restarts
// the count once from a new first page.
// Each page is one API call with its own deadline (timeout).
func recountPods(ctx context.Context, client kubernetes.Interface, timeout time.Duration, nodeName, notOlderThan string) (podCount, error) {
	first := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(), Limit: recountPageSize}
	if notOlderThan != "" {
		first.ResourceVersion, first.ResourceVersionMatch = notOlderThan, metav1.ResourceVersionMatchNotOlderThan
	}
	for attempt := 0; ; attempt++ {
		c, err := recountFrom(ctx, client, timeout, nodeName, first)
		if apierrors.IsResourceExpired(err) && attempt == 0 {
			continue
		}
		return c, err
	}
}

func recountFrom(ctx context.Context, client kubernetes.Interface, timeout time.Duration, nodeName string, first metav1.ListOptions) (podCount, error) {
	var c podCount
	opts := first
	for {
		list, err := actuate.Call(ctx, timeout, func(ctx context.Context) (*corev1.PodList, error) {
			return client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		})
		if err != nil {
			return podCount{}, err
		}
		for i := range list.Items {
			p := &list.Items[i]
			if p.Spec.NodeName != nodeName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			c.Pods++
			if evictedByAPI(p) {
				c.Evicting++
			}
		}
		if list.Continue == "" {
			return c, nil
		}
		opts = metav1.ListOptions{FieldSelector: first.FieldSelector, Limit: first.Limit, Continue: list.Continue}
	}
}

// evictedByAPI reports a pod the Eviction API is evicting (the watcher's
// compact state says the same with events.PodState.EvictedByAPI).
func evictedByAPI(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return c.Reason == events.DisruptionEvictionByEvictionAPI
		}
	}
	return false
}

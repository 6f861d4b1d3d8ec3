package cordon

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

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
	// Evicting counts those being evicted through the Eviction API (only
	// when the recount read whole pods: recounter.count's evicting).
	Evicting int
}

// recounter is the live pod recount that every action is re-verified on.
//
// A decision depends on which pods are being evicted only for a node
// opswire holds (a drain hands it over) and only while the drain rule is on
// (Policy.DrainEvictingPercent). Every other recount, and that includes
// every new cordon, needs the number of pods alone: it reads their metadata
// (PartialObjectMetadataList, protobuf) instead of whole pods, which is what
// makes the recount cheap. The API server selects the pods either way
// (spec.nodeName, status.phase), so both count by the same rule.
type recounter struct {
	client  kubernetes.Interface
	meta    metadata.Interface // nil: every recount reads whole pods
	timeout time.Duration      // per page
}

// pageFunc lists one page: the pods counted on it, of them the ones being
// evicted, and the continue token.
type pageFunc func(ctx context.Context, nodeName string, opts metav1.ListOptions) (podCount, string, error)

// count counts a node's pods with a paged field-selector LIST; evicting
// asks for podCount.Evicting (whole pods).
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
func (r recounter) count(ctx context.Context, nodeName, notOlderThan string, evicting bool) (podCount, error) {
	page := r.podsPage
	if !evicting && r.meta != nil {
		page = r.metadataPage
	}
	first := metav1.ListOptions{FieldSelector: recountSelector(nodeName), Limit: recountPageSize}
	if notOlderThan != "" {
		first.ResourceVersion, first.ResourceVersionMatch = notOlderThan, metav1.ResourceVersionMatchNotOlderThan
	}
	for attempt := 0; ; attempt++ {
		c, err := countPages(ctx, page, nodeName, first)
		if apierrors.IsResourceExpired(err) && attempt == 0 {
			continue
		}
		return c, err
	}
}

// recountSelector selects the pods that count on a node: bound to it, not
// terminated.
func recountSelector(nodeName string) string {
	return fields.AndSelectors(
		fields.OneTermEqualSelector("spec.nodeName", nodeName),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
	).String()
}

func countPages(ctx context.Context, page pageFunc, nodeName string, first metav1.ListOptions) (podCount, error) {
	var c podCount
	opts := first
	for {
		got, next, err := page(ctx, nodeName, opts)
		if err != nil {
			return podCount{}, err
		}
		c.Pods, c.Evicting = c.Pods+got.Pods, c.Evicting+got.Evicting
		if next == "" {
			return c, nil
		}
		opts = metav1.ListOptions{FieldSelector: first.FieldSelector, Limit: first.Limit, Continue: next}
	}
}

// podsPage reads whole pods. It applies the selector's rule again itself,
// so a server (or a fake) that ignored a field selector cannot inflate the
// count.
func (r recounter) podsPage(ctx context.Context, nodeName string, opts metav1.ListOptions) (podCount, string, error) {
	list, err := actuate.Call(ctx, r.timeout, func(ctx context.Context) (*corev1.PodList, error) {
		return r.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
	})
	if err != nil {
		return podCount{}, "", err
	}
	var c podCount
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
	return c, list.Continue, nil
}

// metadataPage reads the pods' metadata only: the field selector is the
// whole rule (metadata carries neither spec.nodeName nor status.phase).
func (r recounter) metadataPage(ctx context.Context, _ string, opts metav1.ListOptions) (podCount, string, error) {
	list, err := actuate.Call(ctx, r.timeout, func(ctx context.Context) (*metav1.PartialObjectMetadataList, error) {
		return r.meta.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(metav1.NamespaceAll).List(ctx, opts)
	})
	if err != nil {
		return podCount{}, "", err
	}
	return podCount{Pods: len(list.Items)}, list.Continue, nil
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

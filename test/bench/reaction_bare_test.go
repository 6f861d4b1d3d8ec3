//go:build bench

package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/opswire/opswire/shared/kube"
)

// logBareRequests sends, one at a time, the requests of a cordon from a bare
// client through the same proxy as opswire-cordon, with the same content
// type: the pod recount of a new cordon (one node's non-terminated pods,
// their metadata, watch cache, at least as new as the cache's list) and the
// cap's LIST of every node (likewise) — which
// opswire sends at once — then a node PATCH. Each is the floor of that step:
// a cordon's reaction is the trigger's write → informer floor, then one
// read step and one patch in series, plus the KUBE hop. It runs after every
// count was taken (its patches change annotations only, which no actor acts
// on).
func logBareRequests(b *testing.B, kubeconfig string, nodes []string, samples int) {
	cfg, err := kube.RESTConfig(kube.Options{Kubeconfig: kubeconfig, QPS: 1000, Burst: 2000, UserAgent: "bench-bare"})
	if err != nil {
		b.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	meta, err := metadata.NewForConfig(metadata.ConfigFor(cfg))
	if err != nil {
		b.Fatal(err)
	}
	podsMeta := meta.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(metav1.NamespaceAll)
	ctx := context.Background()
	var podList, nodeList, patch latencies
	for i := range samples {
		node := nodes[i%len(nodes)]
		// The cache's version now: a LIST of any version is served from it.
		head, err := c.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 1})
		if err != nil {
			b.Fatal(err)
		}
		notOlder := metav1.ListOptions{ResourceVersion: head.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
		byNode := notOlder
		byNode.FieldSelector = fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node),
			fields.OneTermNotEqualSelector("status.phase", "Succeeded"), fields.OneTermNotEqualSelector("status.phase", "Failed")).String()
		byNode.Limit = 500 // the recount's page
		t := time.Now()
		if _, err := podsMeta.List(ctx, byNode); err != nil {
			b.Fatal(err)
		}
		podList = append(podList, time.Since(t))
		t = time.Now()
		if _, err := c.CoreV1().Nodes().List(ctx, notOlder); err != nil {
			b.Fatal(err)
		}
		nodeList = append(nodeList, time.Since(t))
		body := fmt.Sprintf(`{"metadata":{"annotations":{"bench.opswire.io/bare":"%d"}}}`, i)
		t = time.Now()
		if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		patch = append(patch, time.Since(t))
	}
	b.ReportMetric(podList.quantile(0.99), "bare-recount-p99-ms")
	b.ReportMetric(nodeList.quantile(0.99), "bare-nodelist-p99-ms")
	b.ReportMetric(patch.quantile(0.99), "bare-patch-p99-ms")
	b.Logf("a bare client's cordon requests, one at a time through the proxy (%d each; ms p50/p99): pod recount LIST (metadata) %.1f/%.1f, node LIST %.1f/%.1f, node PATCH %.1f/%.1f",
		samples, podList.quantile(0.5), podList.quantile(0.99), nodeList.quantile(0.5), nodeList.quantile(0.99), patch.quantile(0.5), patch.quantile(0.99))
}

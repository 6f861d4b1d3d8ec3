//go:build bench

package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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
// cap's LIST of every node (likewise), each alone and then both at once as
// opswire sends them; the node GET an uncordon's re-read is, alone and at once
// with the recount; then a node PATCH. Each is the floor of that step: a
// cordon's reaction is the trigger's write → informer floor, then one read
// step and one patch in series, plus the KUBE hop. The GET beside the LIST
// shows what the cap's count of every node costs over a re-read of the node
// alone. It runs after every count was taken (its patches change annotations
// only, which no actor acts on).
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
	var (
		node     string
		notOlder metav1.ListOptions // the cache's version now: a LIST of any version is served from it
		byNode   metav1.ListOptions
		i        int
	)
	recount := func() error { _, err := podsMeta.List(ctx, byNode); return err }
	nodeList := func() error { _, err := c.CoreV1().Nodes().List(ctx, notOlder); return err }
	nodeGet := func() error {
		_, err := c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{ResourceVersion: notOlder.ResourceVersion})
		return err
	}
	atOnce := func(first, second func() error) func() error {
		return func() error {
			var wg sync.WaitGroup
			var err1 error
			wg.Go(func() { err1 = first() })
			err2 := second()
			wg.Wait()
			return errors.Join(err1, err2)
		}
	}
	steps := []struct {
		name, metric string
		send         func() error
		took         latencies
	}{
		{name: "pod recount LIST (metadata)", metric: "bare-recount", send: recount},
		{name: "node LIST", metric: "bare-nodelist", send: nodeList},
		{name: "both at once", metric: "bare-reads", send: atOnce(recount, nodeList)},
		{name: "node GET", metric: "bare-nodeget", send: nodeGet},
		{name: "pod recount and node GET at once", metric: "bare-reads-get", send: atOnce(recount, nodeGet)},
		{name: "node PATCH", metric: "bare-patch", send: func() error {
			body := fmt.Sprintf(`{"metadata":{"annotations":{"bench.opswire.io/bare":"%d"}}}`, i)
			_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
			return err
		}},
	}
	for i = range samples {
		node = nodes[i%len(nodes)]
		head, err := c.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 1})
		if err != nil {
			b.Fatal(err)
		}
		notOlder = metav1.ListOptions{ResourceVersion: head.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}
		byNode = notOlder
		byNode.FieldSelector = fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", node),
			fields.OneTermNotEqualSelector("status.phase", "Succeeded"), fields.OneTermNotEqualSelector("status.phase", "Failed")).String()
		byNode.Limit = 500 // the recount's page
		for k := range steps {
			t := time.Now()
			if err := steps[k].send(); err != nil {
				b.Fatalf("%s: %v", steps[k].name, err)
			}
			steps[k].took = append(steps[k].took, time.Since(t))
		}
	}
	var parts []string
	for _, s := range steps {
		b.ReportMetric(s.took.quantile(0.99), s.metric+"-p99-ms")
		parts = append(parts, fmt.Sprintf("%s %.1f/%.1f", s.name, s.took.quantile(0.5), s.took.quantile(0.99)))
	}
	b.Logf("a bare client's cordon requests, one step at a time through the proxy (%d each; ms p50/p99): %s", samples, strings.Join(parts, ", "))
}

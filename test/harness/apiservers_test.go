package harness

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHeldAPIServerServesItsCacheStaleAndEtcdReadsFresh: two kube-apiservers
// on one etcd; while B's etcd watch is held, a Node created through A gets
// into A's cache (at once, in practice) but not into B's: B's LIST at resourceVersion "0" and
// its GET at "0" (both answered from the cache) miss it, while B's GET
// (from etcd) has it. A consistent LIST on B waits for its cache ~3 s, then
// kube-apiserver 1.37 reads etcd: the Node is there. A LIST at the Node's
// resourceVersion gets 504 after the same wait (client-go retries that up to
// 10 times, ~40 s). Writes through B go through; a watch on B gets nothing
// until the release, then everything, in order, and B's cache catches up.
func TestHeldAPIServerServesItsCacheStaleAndEtcdReadsFresh(t *testing.T) {
	ctx := context.Background()
	cp := StartControlPlane(t)
	b := cp.AddAPIServer(t, WithWatchHold())
	a := cp.Client
	createNodeThrough(t, a, "before-hold")
	Eventually(t, 10*time.Second, "B's cache to have the node created through A", func() bool {
		return nodeListHas(t, b.Client, "0", "before-hold")
	})

	b.HoldWatch()
	held := createNodeThrough(t, a, "while-held")
	if _, err := a.CoreV1().Nodes().Get(ctx, "while-held", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET through A: %v", err)
	}
	Eventually(t, 5*time.Second, "A's cache (LIST at resourceVersion 0) to have the node", func() bool {
		return nodeListHas(t, a, "0", "while-held")
	})
	if nodeListHas(t, b.Client, "0", "while-held") {
		t.Fatal("B's LIST at resourceVersion 0 has the node: its cache does not lag")
	}
	if _, err := b.Client.CoreV1().Nodes().Get(ctx, "while-held", metav1.GetOptions{ResourceVersion: "0"}); !apierrors.IsNotFound(err) {
		t.Fatalf("B's GET at resourceVersion 0 = %v, want NotFound from its lagging cache", err)
	}
	if _, err := b.Client.CoreV1().Nodes().Get(ctx, "while-held", metav1.GetOptions{}); err != nil {
		t.Fatalf("B's GET (from etcd): %v", err)
	}
	start := time.Now()
	if !nodeListHas(t, b.Client, "", "while-held") {
		t.Fatal("B's consistent LIST misses the node")
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("B's consistent LIST took %v: it did not wait for the held cache first", waited)
	}
	status, retryAfter := listNodesOnce(t, b.Config, held.ResourceVersion)
	if status != http.StatusGatewayTimeout || retryAfter == "" {
		t.Fatalf("B's LIST at resourceVersion %s: %d (Retry-After %q), want 504 with a Retry-After", held.ResourceVersion, status, retryAfter)
	}

	w, err := b.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: held.ResourceVersion})
	if err != nil {
		t.Fatalf("watch through B: %v", err)
	}
	defer w.Stop()
	createNodeThrough(t, b.Client, "through-b") // writes go to etcd: the hold does not stop them
	Eventually(t, 5*time.Second, "A's cache to have the node written through B", func() bool {
		return nodeListHas(t, a, "0", "through-b")
	})
	if nodeListHas(t, b.Client, "0", "through-b") {
		t.Fatal("B's cache has the node written through B while its watch is held")
	}
	select {
	case ev := <-w.ResultChan():
		t.Fatalf("watch through B got %s while held", ev.Type)
	default:
	}

	b.ReleaseWatch()
	Eventually(t, 10*time.Second, "B's cache to catch up", func() bool {
		return nodeListHas(t, b.Client, "0", "while-held") && nodeListHas(t, b.Client, "0", "through-b")
	})
	select {
	case ev := <-w.ResultChan():
		if n, ok := ev.Object.(*corev1.Node); ev.Type != watch.Added || !ok || n.Name != "through-b" {
			t.Fatalf("watch through B after the release: %s %v, want ADDED through-b", ev.Type, ev.Object)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch through B got nothing after the release")
	}
}

func createNodeThrough(t *testing.T, c kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	n, err := c.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return n
}

// nodeListHas lists the Nodes at resourceVersion rv ("" for a consistent LIST).
func nodeListHas(t *testing.T, c kubernetes.Interface, rv, name string) bool {
	t.Helper()
	l, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatalf("list nodes at resourceVersion %q: %v", rv, err)
	}
	for _, n := range l.Items {
		if n.Name == name {
			return true
		}
	}
	return false
}

// listNodesOnce lists Nodes at rv once (client-go would retry a 504 with a
// Retry-After) and returns the status and the Retry-After.
func listNodesOnce(t *testing.T, cfg *rest.Config, rv string) (int, string) {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/api/v1/nodes?resourceVersion=" + rv)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// TestAddedAPIServerTakesTheControlPlanesTokens: a ServiceAccount token
// issued through cp's server authenticates on an added one (same signing
// keys), before and after that one's restart; the admin token works too.
func TestAddedAPIServerTakesTheControlPlanesTokens(t *testing.T) {
	cp := StartControlPlane(t)
	b := cp.AddAPIServer(t)
	kc := b.ServiceAccountKubeconfig(t, "default", "someone")
	check := func(when string) {
		t.Helper()
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != b.URL {
			t.Fatalf("kubeconfig for %s points at %s", b.URL, cfg.Host)
		}
		// Authenticated, without rights (RBAC): Forbidden, not Unauthorized.
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "system:serviceaccount:default:someone") {
			t.Fatalf("%s: ServiceAccount token on the added server: %v, want Forbidden for system:serviceaccount:default:someone", when, err)
		}
		if _, err := b.Client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: admin token on the added server: %v", when, err)
		}
	}
	check("started")
	b.Restart(t)
	check("restarted")
}

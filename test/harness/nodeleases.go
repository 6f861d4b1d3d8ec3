package harness

import (
	"context"
	"fmt"
	"log"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// UnreachableAnnotation on a node stops the harness renewing its Lease
// (any value): the node lifecycle controller then sees a node whose kubelet
// went silent. Outside opswire.io/, so the watcher does not carry it.
const UnreachableAnnotation = "harness.opswire.io/unreachable"

// NodeLeases renews the node Leases (kube-node-lease/<node>) of the fake
// nodes, in place of their kubelets.
//
// The node lifecycle controller counts a node as alive while either its
// Lease's renewTime or its Ready condition's lastHeartbeatTime advances; a
// node that goes a grace period without either is set Ready=Unknown
// ("Kubelet stopped posting node status.") and tainted
// node.kubernetes.io/unreachable. A node that never posted a Ready
// condition gets --node-startup-grace-period from its creation instead, then
// Ready, MemoryPressure, DiskPressure and PIDPressure Unknown
// ("NodeStatusNeverUpdated"), unless its Lease is renewed: the controller
// then leaves it alone. Leases are what a kubelet renews every 10 s; they
// do not change the Node object, so opswire's watcher sees no node update
// per renewal, as in production.
//
// The NoExecute taints also depend on the zone's health, where a node
// without a Ready condition counts as not Ready: in a zone with 3 or more
// not Ready and at least 55% of its nodes, the controller adds no
// NoExecute taint in a cluster of up to 50 nodes (--large-cluster-size-
// threshold); with every node of every zone not Ready it removes them all.
type NodeLeases struct {
	c        kubernetes.Interface
	interval atomic.Int64 // nanoseconds
	log      *log.Logger
	rounds   atomic.Int64 // finished, for tests

	mu      sync.Mutex
	leases  map[string]*coordv1.Lease // the last written, by node name
	foreign map[string]bool           // nodes whose Lease another writer renews
	lastErr map[string]string
}

var nodeLeases sync.Map // *ControlPlane -> *NodeLeases

// KeepNodesAlive renews, every interval, the Lease of every node of cp but
// those annotated UnreachableAnnotation, creating it as a kubelet does
// (holder the node, owned by the Node, so the garbage collector deletes it
// with the node). A node with a real kubelet, whose Lease that kubelet
// writes, is left to it. It runs until t's cleanup; a second call while it
// runs returns the same renewer, with the shorter interval of the two.
// It returns once every node has a Lease. StartControllers calls it.
func (cp *ControlPlane) KeepNodesAlive(t testing.TB, interval time.Duration) *NodeLeases {
	t.Helper()
	if interval <= 0 {
		t.Fatalf("KeepNodesAlive: interval %v", interval)
	}
	// A client of its own, without client-side rate limit: thousands of
	// nodes' renewals must fit in one interval (the 8 workers bound them).
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS = -1
	r := &NodeLeases{c: kubernetes.NewForConfigOrDie(cfg), leases: map[string]*coordv1.Lease{},
		foreign: map[string]bool{}, lastErr: map[string]string{}}
	r.interval.Store(int64(interval))
	if v, loaded := nodeLeases.LoadOrStore(cp, r); loaded {
		running := v.(*NodeLeases)
		if int64(interval) < running.interval.Load() {
			running.interval.Store(int64(interval))
		}
		return running
	}
	f, err := os.Create(logPath(t, "node-leases.log"))
	if err != nil {
		nodeLeases.Delete(cp)
		t.Fatal(err)
	}
	r.log = log.New(f, "", log.LstdFlags|log.Lmicroseconds)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
		nodeLeases.Delete(cp)
		f.Close()
	})
	// The first round before returning: every node has a fresh Lease when
	// the node lifecycle controller first looks. A node that never posted
	// a Ready condition counts its startup grace period from its creation,
	// so one created a while before would otherwise be Unknown at once.
	r.round(ctx)
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(r.interval.Load())):
			}
			r.round(ctx)
		}
	}()
	return r
}

// round renews the Lease of every node not marked unreachable, 8 at a
// time (a scale test has thousands).
func (r *NodeLeases) round(ctx context.Context) {
	defer r.rounds.Add(1)
	// ResourceVersion "0": served from the API server's cache, which is
	// all a renewal needs and spares etcd a full read every round.
	nodes, err := r.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		r.logErr("", err)
		return
	}
	now := metav1.NewMicroTime(time.Now())
	work := make(chan *corev1.Node)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := range work {
				r.logErr(n.Name, r.renew(ctx, n, now))
			}
		})
	}
	present := map[string]bool{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		present[n.Name] = true
		if _, off := n.Annotations[UnreachableAnnotation]; !off {
			work <- n
		}
	}
	close(work)
	wg.Wait()
	r.mu.Lock()
	for name := range r.leases {
		if !present[name] {
			delete(r.leases, name)
		}
	}
	for name := range r.foreign {
		if !present[name] {
			delete(r.foreign, name)
		}
	}
	r.mu.Unlock()
}

// leaseManager is the field manager of the harness's Lease writes: a
// Lease with another manager is a real kubelet's.
const leaseManager = "opswire-harness"

// renew writes the node's Lease with renewTime now: an update of the one
// last written when there is one (no read), else a create, else (the Lease
// exists) a read and an update, unless another writer manages it (a real
// kubelet, of a node the harness runs one for): that node is left to it.
func (r *NodeLeases) renew(ctx context.Context, n *corev1.Node, now metav1.MicroTime) error {
	if ctx.Err() != nil {
		return nil
	}
	leases := r.c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	r.mu.Lock()
	last, foreign := r.leases[n.Name], r.foreign[n.Name]
	r.mu.Unlock()
	if foreign {
		return nil
	}
	var (
		out *coordv1.Lease
		err error
	)
	if last != nil {
		l := last.DeepCopy()
		r.fill(l, n, now)
		out, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: leaseManager})
	} else {
		l := &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease}}
		r.fill(l, n, now)
		out, err = leases.Create(ctx, l, metav1.CreateOptions{FieldManager: leaseManager})
		if apierrors.IsAlreadyExists(err) {
			if l, err = leases.Get(ctx, n.Name, metav1.GetOptions{}); err == nil {
				for _, m := range l.ManagedFields {
					if m.Manager != leaseManager {
						r.mu.Lock()
						r.foreign[n.Name] = true
						r.mu.Unlock()
						r.log.Printf("node %q: its Lease is written by %q: left to it", n.Name, m.Manager)
						return nil
					}
				}
				r.fill(l, n, now)
				out, err = leases.Update(ctx, l, metav1.UpdateOptions{FieldManager: leaseManager})
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		// Conflict (another writer: the next round finds out who) or
		// NotFound (the garbage collector deleted it with an earlier node
		// of the same name): start afresh next round.
		delete(r.leases, n.Name)
		return err
	}
	r.leases[n.Name] = out
	return nil
}

// fill makes l what the node's kubelet keeps it: held by the node, lasting
// four renewal intervals (a kubelet: 40 s for 10 s), owned by the Node.
func (r *NodeLeases) fill(l *coordv1.Lease, n *corev1.Node, now metav1.MicroTime) {
	holder := n.Name
	secs := int32(math.Ceil((4 * time.Duration(r.interval.Load())).Seconds()))
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &holder, &secs, &now
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
}

// logErr writes a renewal error to node-leases.log when it differs from
// the node's previous one (a stuck API server would repeat it every round).
func (r *NodeLeases) logErr(node string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if r.lastErr[node] == msg {
		return
	}
	r.lastErr[node] = msg
	switch {
	case err != nil:
		r.log.Printf("node %q: %v", node, err)
	case node != "":
		r.log.Printf("node %q: renewed again", node)
	}
}

// MakeUnreachable stops the Lease renewals of a node, as if its kubelet or
// its network died: after --node-monitor-grace-period the node lifecycle
// controller sets its Ready condition Unknown and taints it
// node.kubernetes.io/unreachable (NoSchedule, and NoExecute at the eviction
// rate while its zone is healthy: NodeLeases says when it is not).
// MakeReachable resumes them.
func MakeUnreachable(t testing.TB, c kubernetes.Interface, node string) {
	t.Helper()
	patchAnnotation(t, c, node, fmt.Sprintf(`{"metadata":{"annotations":{%q:"true"}}}`, UnreachableAnnotation))
}

// MakeReachable resumes the Lease renewals of a node MakeUnreachable
// stopped and posts what its kubelet would on coming back: the conditions
// the node lifecycle controller set Unknown go back to Ready True and no
// pressure, with fresh heartbeats. The controller then lifts the
// unreachable taints.
func MakeReachable(t testing.TB, c kubernetes.Interface, node string) {
	t.Helper()
	patchAnnotation(t, c, node, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, UnreachableAnnotation))
	back := map[corev1.NodeConditionType]struct {
		status          corev1.ConditionStatus
		reason, message string
	}{
		corev1.NodeReady:          {corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
		corev1.NodeMemoryPressure: {corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		corev1.NodeDiskPressure:   {corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		corev1.NodePIDPressure:    {corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	}
	SetNodeStatus(t, c, node, func(s *corev1.NodeStatus) {
		now := metav1.Now()
		for i := range s.Conditions {
			cond := &s.Conditions[i]
			if b, ok := back[cond.Type]; ok && cond.Status == corev1.ConditionUnknown {
				cond.Status, cond.Reason, cond.Message = b.status, b.reason, b.message
				cond.LastHeartbeatTime, cond.LastTransitionTime = now, now
			}
		}
	})
}

func patchAnnotation(t testing.TB, c kubernetes.Interface, node, patch string) {
	t.Helper()
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate node %s: %v", node, err)
	}
}

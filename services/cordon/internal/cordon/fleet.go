package cordon

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/events"
)

// Fleets counts the nodes the blast-radius cap is computed from: from the
// mirror (cheap, for the gauge and a first check) and from the API (before
// every new cordon, so that a stale mirror cannot let the cap be exceeded).
type Fleets struct {
	nodes   NodeSource
	ledger  *Ledger
	policy  Policy
	client  kubernetes.Interface // nil: no API count (unit tests of the mirror path)
	timeout time.Duration
}

// NewFleets builds the counter; client may be nil, then Live counts from the
// mirror only.
func NewFleets(nodes NodeSource, ledger *Ledger, policy Policy, client kubernetes.Interface, timeout time.Duration) *Fleets {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &Fleets{nodes: nodes, ledger: ledger, policy: policy, client: client, timeout: timeout}
}

var _ FleetCounter = (*Fleets)(nil)

// tally merges the nodes counting toward the cap by name, so a node seen by
// several sources (the mirror, the ledger, two API lists) counts once.
type tally struct {
	p       Policy
	exclude string
	held    map[string]bool
	marks   map[string]bool
}

func newTally(p Policy, exclude string) *tally {
	return &tally{p: p, exclude: exclude, held: map[string]bool{}, marks: map[string]bool{}}
}

func (t *tally) add(n *events.NodeState, marked bool) {
	switch {
	case n.Name == t.exclude:
	case marked:
		t.marks[n.Name], t.held[n.Name] = true, true
	case t.p.CountsUnavailable() && t.p.Managed(n) && Unavailable(n):
		t.held[n.Name] = true
	}
}

func (t *tally) fleet(managed int) Fleet {
	return Fleet{Held: len(t.held), Marks: len(t.marks), Managed: managed}
}

// Mirror counts from the mirror and the ledger (marks written but not shown
// yet). exclude is the node being decided on ("" none): a node that is
// itself out of service does not block its own cordon.
func (f *Fleets) Mirror(exclude string) Fleet {
	t, managed := newTally(f.policy, exclude), 0
	for _, n := range f.nodes.Nodes() {
		if f.policy.Managed(n) {
			managed++
		}
		t.add(n, f.ledger.Marked(n))
	}
	return t.fleet(managed)
}

// Live counts from the API, from one LIST of every node: served from the API
// server's watch cache with resourceVersionMatch=NotOlderThan notOlderThan,
// or, when notOlderThan is "", a consistent read (a quorum read of etcd's
// revision, which the API server answers only once its cache holds it, or
// from etcd). So the count includes every write up to that version, whatever
// the mirror and whatever this API server's watch cache show: the nodes carrying opswire's label,
// and with capCounts "unavailable" every managed node cordoned by anyone
// (spec.unschedulable) or NotReady (its Ready condition False or Unknown),
// and the managed fleet itself (the percentage cap's denominator). Nothing
// comes from the mirror, which may be stale (a stopped watcher, a NATS
// outage). Marks found in the API are taught to the ledger, so the mirror
// path counts them as well. The excluded node comes back as the LIST
// returned it (Fleet.node): for a new cordon this one LIST is also the
// node's re-read. A failed LIST is an error (the caller fails closed).
func (f *Fleets) Live(ctx context.Context, notOlderThan, exclude string) (Fleet, error) {
	if f.client == nil {
		return f.Mirror(exclude), nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	var opts metav1.ListOptions
	if notOlderThan != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = notOlderThan, metav1.ResourceVersionMatchNotOlderThan
	}
	list, err := f.client.CoreV1().Nodes().List(ctx, opts)
	if err != nil && notOlderThan != "" && (apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)) {
		// A watch cache behind notOlderThan answers 504 after waiting for
		// it: read consistently instead, never count a smaller fleet.
		list, err = f.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	}
	if err != nil {
		return Fleet{}, fmt.Errorf("list nodes: %w", err)
	}
	t, managed := newTally(f.policy, exclude), 0
	var target *corev1.Node
	for i := range list.Items {
		n := &list.Items[i]
		if exclude != "" && n.Name == exclude {
			target = n
		}
		s := stateFromNode(n, 0)
		s.Ready = readyOf(n)
		marked := hasLabel(s, events.LabelAutoCordon)
		if marked {
			f.ledger.Learn(n.Name, string(n.UID), n.ResourceVersion, true, n.Spec.Unschedulable)
		}
		if f.policy.Managed(s) {
			managed++
		}
		t.add(s, marked)
	}
	for _, name := range f.ledger.SimulatedMarks() {
		t.add(&events.NodeState{Name: name}, true)
	}
	out := t.fleet(managed)
	out.asOf, out.listed, out.node = list.ResourceVersion, true, target
	return out, nil
}

// readyOf is the status of a node's Ready condition ("" when it has none).
func readyOf(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return string(c.Status)
		}
	}
	return ""
}

// markSelector selects the nodes carrying opswire's label.
var markSelector = func() labels.Selector {
	r, err := labels.NewRequirement(events.LabelAutoCordon, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*r)
}()

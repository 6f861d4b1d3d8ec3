package cordon

import (
	"maps"
	"slices"
	"sync"

	"github.com/opswire/opswire/shared/events"
)

// Ledger remembers the marks opswire wrote until the KUBE mirror shows them.
//
// Without it the blast-radius cap would be computed from a mirror that lags
// each write by a few milliseconds: ten nodes crossing the threshold at once
// would all see "nobody held yet" and all be cordoned. In dry-run nothing is
// written, so the ledger keeps the simulated marks for good: the dry run then
// makes the same sequence of decisions a real run would (including the cap
// and hysteresis) and does not repeat itself on every tick.
type Ledger struct {
	simulate bool

	mu      sync.Mutex
	pending map[string]pendingMark
}

type pendingMark struct {
	uid    string
	marked bool
}

// NewLedger builds a ledger; simulate is true in dry-run.
func NewLedger(simulate bool) *Ledger {
	return &Ledger{simulate: simulate, pending: map[string]pendingMark{}}
}

// Record notes that opswire (would have) set or removed its mark on a node.
func (l *Ledger) Record(name, uid string, marked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[name] = pendingMark{uid: uid, marked: marked}
}

// Marked reports whether the node carries opswire's mark, as far as opswire
// knows: its own recent writes first, then the mirror. An entry is dropped
// as soon as the mirror agrees with it, or when the node was replaced.
func (l *Ledger) Marked(n *events.NodeState) bool {
	fromMirror := hasLabel(n, events.LabelAutoCordon)
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pending[n.Name]
	if !ok {
		return fromMirror
	}
	if p.uid != n.UID || (!l.simulate && p.marked == fromMirror) {
		delete(l.pending, n.Name)
		return fromMirror
	}
	return p.marked
}

// Correct replaces what the ledger believes with what the API just said: a
// fresh GET is newer than anything the ledger or the mirror hold. In dry-run
// the simulated mark stays, since the API never carries it.
func (l *Ledger) Correct(name string, liveMarked bool) {
	if l.simulate {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if p, ok := l.pending[name]; ok && p.marked != liveMarked {
		delete(l.pending, name)
	}
}

// Forget drops what is known about a deleted node.
func (l *Ledger) Forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, name)
}

// View returns the node as opswire believes it is: when the ledger holds a
// mark the state does not show yet (or, in dry-run, a simulated one), a copy
// with the mark and the policy's effect applied (or removed); and whether
// the node is marked.
func (l *Ledger) View(p Policy, n *events.NodeState) (*events.NodeState, bool) {
	marked := l.Marked(n)
	if marked == hasLabel(n, events.LabelAutoCordon) {
		return n, marked
	}
	v := *n
	v.Labels = maps.Clone(n.Labels)
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	v.Taints = slices.DeleteFunc(slices.Clone(n.Taints), func(t events.Taint) bool {
		return t.Key == p.TaintKey && t.Effect == "NoSchedule"
	})
	if marked {
		v.Labels[events.LabelAutoCordon] = MarkLabelValue
		if p.Mode == EffectTaint {
			v.Taints = append(v.Taints, events.Taint{Key: p.TaintKey, Value: MarkLabelValue, Effect: "NoSchedule"})
		} else {
			v.Unschedulable = true
		}
	} else {
		delete(v.Labels, events.LabelAutoCordon)
		v.Unschedulable = false
	}
	return &v, marked
}

package cordon

import (
	"maps"
	"slices"
	"strconv"
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
	// rv is the node's resourceVersion the entry is true at ("" unknown): a
	// mirror state at least that new supersedes the entry, whatever it shows.
	rv string
	// annotation is, in dry-run, the mark annotation the simulated cordon
	// would have written (its departure baseline included), so the simulated
	// node carries it as the real one would.
	annotation string
	// cordoned is, for an entry without the mark, whether the node is
	// unschedulable without it (nil: the release lifted what the mark
	// lists): a handover keeps the cordon, and a node read live says. A
	// view that lifted the cordon of a node handed over would show a
	// schedulable node over maxPods, a cordon to refuse when the cap is full.
	cordoned *bool
}

// NewLedger builds a ledger; simulate is true in dry-run.
func NewLedger(simulate bool) *Ledger {
	return &Ledger{simulate: simulate, pending: map[string]pendingMark{}}
}

// Record notes that opswire (would have) set or removed its mark on a node.
func (l *Ledger) Record(name, uid string, marked bool) { l.RecordAt(name, uid, "", marked) }

// RecordAt notes the node's mark as of resourceVersion rv: opswire's own
// write (rv = the version the write produced), or what the API showed.
func (l *Ledger) RecordAt(name, uid, rv string, marked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[name] = pendingMark{uid: uid, marked: marked, rv: rv}
}

// RecordRelease notes that opswire removed its mark from a node, as of
// resourceVersion rv: an uncordon (lifts what the mark lists) or a handover
// (lifts the mark's taints and keeps the cordon).
func (l *Ledger) RecordRelease(name, uid, rv string, handover bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := pendingMark{uid: uid, rv: rv}
	if handover {
		e.cordoned = ptr(true)
	}
	l.pending[name] = e
}

// Simulate notes, in dry-run, a simulated cordon and the mark annotation it
// would have written.
func (l *Ledger) Simulate(name, uid, annotation string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending[name] = pendingMark{uid: uid, marked: true, annotation: annotation}
}

// Learn replaces what the ledger believes with what the API just said
// (a re-verifying GET, a LIST): it is newer than anything the ledger or a
// lagging mirror hold, so a mark found live is counted until the mirror
// catches up, and a node found unmarked is seen with its live cordon
// (unschedulable). In dry-run the simulated marks stay, since the API never
// carries them.
func (l *Ledger) Learn(name, uid, rv string, liveMarked, unschedulable bool) {
	if l.simulate {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := pendingMark{uid: uid, marked: liveMarked, rv: rv}
	if !liveMarked {
		e.cordoned = ptr(unschedulable)
	}
	l.pending[name] = e
}

// SimulatedMarks returns, in dry-run, the nodes a dry run marked (and nil in
// a real run, where the API carries every mark opswire wrote).
func (l *Ledger) SimulatedMarks() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	if !l.simulate {
		return nil
	}
	for name, p := range l.pending {
		if p.marked {
			out = append(out, name)
		}
	}
	return out
}

// Marked reports whether the node carries opswire's mark, as far as opswire
// knows: its own recent writes first, then the mirror. An entry is dropped
// as soon as the mirror agrees with it or shows a newer version,
// or when the node was replaced.
func (l *Ledger) Marked(n *events.NodeState) bool {
	fromMirror := hasLabel(n, events.LabelAutoCordon)
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.pending[n.Name]
	if !ok {
		return fromMirror
	}
	if p.uid != n.UID || (!l.simulate && (p.marked == fromMirror || rvNewer(n.ResourceVersion, p.rv))) {
		delete(l.pending, n.Name)
		return fromMirror
	}
	return p.marked
}

// Forget drops what is known about a deleted node.
func (l *Ledger) Forget(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pending, name)
}

// View returns the node as opswire believes it is: when the ledger holds a
// mark the state does not show yet (or, in dry-run, a simulated one), a copy
// with the mark and the policy's effect applied; when it holds a release the
// state does not show yet, a copy without the mark and without what the
// release lifted (what the mark lists; a handover keeps the cordon); and
// whether the node is marked.
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
	if marked {
		v.Labels[events.LabelAutoCordon] = MarkLabelValue
		v.Taints = slices.DeleteFunc(slices.Clone(n.Taints), func(t events.Taint) bool {
			return t.Key == p.TaintKey && t.Effect == "NoSchedule"
		})
		if ann := l.simulatedAnnotation(n.Name); ann != "" {
			v.Annotations = maps.Clone(n.Annotations)
			if v.Annotations == nil {
				v.Annotations = map[string]string{}
			}
			v.Annotations[events.AnnotationAutoCordon] = ann
		}
		if p.Mode == EffectTaint {
			v.Taints = append(v.Taints, events.Taint{Key: p.TaintKey, Value: MarkLabelValue, Effect: "NoSchedule"})
		} else {
			v.Unschedulable = true
		}
		return &v, marked
	}
	// The release lifted what the mark the state still shows lists.
	effects, taintKeys := p.markEffects(n.Annotations)
	delete(v.Labels, events.LabelAutoCordon)
	v.Annotations = maps.Clone(n.Annotations)
	delete(v.Annotations, events.AnnotationAutoCordon)
	if slices.Contains(effects, EffectTaint) {
		v.Taints = slices.DeleteFunc(slices.Clone(n.Taints), func(t events.Taint) bool {
			return t.Effect == "NoSchedule" && slices.Contains(taintKeys, t.Key)
		})
	}
	switch cordoned := l.releasedCordon(n.Name); {
	case cordoned != nil:
		v.Unschedulable = *cordoned
	case slices.Contains(effects, EffectCordon):
		v.Unschedulable = false
	}
	return &v, marked
}

// releasedCordon is, for a release the ledger holds, whether the node stays
// cordoned (nil: the release lifted what the mark lists).
func (l *Ledger) releasedCordon(name string) *bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending[name].cordoned
}

func (l *Ledger) simulatedAnnotation(name string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.simulate {
		return ""
	}
	return l.pending[name].annotation
}

// rvNewer reports whether resourceVersion a is newer than b (false when
// either is unknown). A mirror state of exactly the entry's version agrees
// with it by construction, so only a newer one supersedes it.
func rvNewer(a, b string) bool { return rvAtLeast(a, b) && a != b }

// rvAtLeast reports whether resourceVersion a is at least b (etcd revisions;
// false when either is unknown).
func rvAtLeast(a, b string) bool {
	ai, errA := strconv.ParseUint(a, 10, 64)
	bi, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && ai >= bi
}

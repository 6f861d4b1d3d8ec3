package cleanup

import (
	"sync"

	"github.com/opswire/opswire/shared/events"
)

// NodeTally is the cluster's node count for the mass-failure brake, kept
// per node as the mirror reports each one. A node event is counted in the
// handler that reports it, before any pod it re-examines is queued, so no
// decision is made on a count older than the event that queued it; and the
// actuator reads the tally again right before a write (Facts.Tally), so a
// node that went Unknown while the pod was being re-read engages the brake
// for that write.
type NodeTally struct {
	mu      sync.Mutex
	ready   map[string]bool // by node name: its Ready condition is True
	n       NodeCount       // what ready holds, kept with it
	counted bool            // a full count was taken (Reset)
}

// NewNodeTally returns an empty tally; Count reports no count until Reset.
func NewNodeTally() *NodeTally { return &NodeTally{ready: map[string]bool{}} }

// Reset counts every node of s. The nodes are read under the tally's lock,
// so an event that Observe applies concurrently is either already in the
// nodes read or applied after them: never lost.
func (t *NodeTally) Reset(s State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ready, t.n = map[string]bool{}, NodeCount{}
	for _, n := range s.Nodes() {
		t.set(n.Name, n.Ready == "True")
	}
	t.counted = true
}

// Observe applies one node event (old nil: added; cur nil: deleted).
func (t *NodeTally) Observe(old, cur *events.NodeState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur == nil {
		if old != nil {
			t.remove(old.Name)
		}
		return
	}
	t.set(cur.Name, cur.Ready == "True")
}

func (t *NodeTally) set(name string, ready bool) {
	t.remove(name)
	t.ready[name] = ready
	t.n.Nodes++
	if !ready {
		t.n.NotReady++
	}
}

func (t *NodeTally) remove(name string) {
	ready, ok := t.ready[name]
	if !ok {
		return
	}
	delete(t.ready, name)
	t.n.Nodes--
	if !ready {
		t.n.NotReady--
	}
}

// Count is the node count now, and whether a full count was ever taken.
func (t *NodeTally) Count() (NodeCount, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n, t.counted
}

// countNow is the node count as it stands now: the tally's when there is
// one, else the count the decision was made on.
func (f Facts) countNow() NodeCount {
	if f.Tally != nil {
		if n, ok := f.Tally.Count(); ok {
			return n
		}
	}
	return f.Nodes
}

package cordon

import (
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/shared/events"
)

// departureWait bounds how long a release waits for departures the node's
// pod count already shows but its departure totals do not (see Changes).
const departureWait = 10 * time.Second

// Changes is what the mirror's node handler feeds the controller. It is
// built before the mirror and the controller, so neither needs the other to
// exist: the handler only queues node names and notes two facts per node:
//   - deleted: the controller forgets what it remembers of the node before
//     it next decides on that name;
//   - a departure gap: the node's pod count fell by more than its departure
//     totals rose since a previous state. The watcher counts a departure in
//     the pod's sync, which may run after a recount of the node already
//     published the lower count (docs/watcher.md, Departures); a release
//     decided on such a state would not see the last evictions of a drain.
//     The controller postpones a release while the gap lasts (the pod
//     syncs queue the node again, and the next state carries them), at most
//     departureWait from when the gap was first seen.
type Changes struct {
	queue workqueue.TypedRateLimitingInterface[string]
	now   func() time.Time

	mu      sync.Mutex
	deleted map[string]bool
	gaps    map[string]gap
}

// gap is the state a node's pod count fell from: its pods and departure
// total then, and when the shortfall was first seen.
type gap struct {
	pods, departed int
	since          time.Time
}

// NewChanges builds the queue of node names the controller works from.
func NewChanges() *Changes {
	rl := workqueue.NewTypedMaxOfRateLimiter(
		// Per node: failed writes back off from 500 ms to 5 min.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](500*time.Millisecond, 5*time.Minute),
	)
	return &Changes{
		queue:   workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[string]{Name: "cordon"}),
		now:     time.Now,
		deleted: map[string]bool{},
		gaps:    map[string]gap{},
	}
}

// OnNode is the mirror's node handler.
func (ch *Changes) OnNode(old, cur *events.NodeState) {
	switch {
	case cur == nil && old == nil:
		return
	case cur == nil:
		ch.mu.Lock()
		ch.deleted[old.Name] = true
		delete(ch.gaps, old.Name)
		ch.mu.Unlock()
		ch.queue.Add(old.Name)
		return
	}
	ch.mu.Lock()
	delete(ch.deleted, cur.Name)
	ch.noteGap(old, cur)
	ch.mu.Unlock()
	ch.queue.Add(cur.Name)
}

// noteGap keeps, while the node's pod count has fallen by more than its
// departure totals account for, the state it fell from. Pods that arrived
// meanwhile hide a shortfall; they also keep the count above where it was.
// Callers hold ch.mu.
func (ch *Changes) noteGap(old, cur *events.NodeState) {
	g, open := ch.gaps[cur.Name]
	if !open {
		if old == nil {
			return
		}
		g = gap{pods: old.Pods, departed: old.Departed, since: ch.now()}
	}
	if g.pods-cur.Pods > cur.Departed-g.departed {
		ch.gaps[cur.Name] = g
		return
	}
	delete(ch.gaps, cur.Name)
}

// takeDeleted reports whether the node was deleted since the controller
// last asked, and clears it.
func (ch *Changes) takeDeleted(name string) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	d := ch.deleted[name]
	delete(ch.deleted, name)
	return d
}

// departuresPending returns how much longer a release of the node should
// wait for departures not yet counted (0: none pending, or waited long
// enough).
func (ch *Changes) departuresPending(name string) time.Duration {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	g, open := ch.gaps[name]
	if !open {
		return 0
	}
	left := departureWait - ch.now().Sub(g.since)
	if left <= 0 {
		delete(ch.gaps, name)
		return 0
	}
	return left
}

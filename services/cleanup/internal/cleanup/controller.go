package cleanup

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

// State is the part of the KUBE mirror the controller reads.
type State interface {
	Pod(namespace, name string) (*events.PodState, bool)
	Node(name string) (*events.NodeState, bool)
	Pods() []*events.PodState
	Nodes() []*events.NodeState
}

// Controller turns mirror changes and a reconcile tick into decisions. Pod
// keys (namespace/name) go through one rate-limited delaying workqueue, so a
// pod is never handled by two workers at once, repeated changes collapse into
// one visit, and a pod that becomes due later (minAge, terminatingTimeout, rate
// limit) is scheduled with AddAfter rather than waiting for the next tick.
//
// The controller also keeps the cluster's node count for the mass-failure
// brake (Policy.Braking) in a NodeTally that each node event updates before
// it queues a pod, so no pod is decided on a count older than the event that
// queued it. The brake's transitions (its gauge, its log, re-examining the
// pods it held) are left to the Run loop. Run counts before it starts the
// workers, and a pod is not decided on while the count is unknown: a zero
// count means "no nodes, no brake".
type Controller struct {
	policy   Policy
	act      *Actuator
	metrics  *Metrics
	queue    workqueue.TypedRateLimitingInterface[string]
	interval time.Duration
	workers  int
	now      func() time.Time
	log      zerolog.Logger

	tally   *NodeTally
	recount chan struct{} // a node appeared, went or changed readiness
	braking bool          // the brake as Run's loop last judged it
}

// NewController builds a controller; Run starts it.
// now is the clock of the decisions (the API server's, ServerClock.Now).
func NewController(policy Policy, act *Actuator, m *Metrics, interval time.Duration, workers int, now func() time.Time, log zerolog.Logger) *Controller {
	if now == nil {
		now = time.Now
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "cleanup"})
	return &Controller{policy: policy, act: act, metrics: m, queue: q, interval: interval, workers: workers, now: now, log: log,
		tally: NewNodeTally(), recount: make(chan struct{}, 1)}
}

// Len is the number of keys waiting (for a gauge).
func (c *Controller) Len() int { return c.queue.Len() }

// OnPod is the mirror's pod handler: it only enqueues.
func (c *Controller) OnPod(old, cur *events.PodState) {
	if old != nil && (cur == nil || cur.UID != old.UID) {
		c.act.Forget(old.UID)
	}
	if c.relevant(cur) {
		c.queue.Add(key(cur.Namespace, cur.Name))
	}
}

// relevant filters out, before the queue, the pods that are no cleanup
// candidates (almost all of them): a tick over 150,000 pods then costs one
// cheap decision per pod instead of a queue round trip. The node only turns a
// candidate into a skip, never into "none", so deciding without it is exact.
// A key already queued for a pod that stopped qualifying is harmless: the
// worker decides again and finds nothing to do.
func (c *Controller) relevant(p *events.PodState) bool {
	return p != nil && c.policy.Decide(p, Facts{Now: c.now()}).Action != None
}

// OnNode counts the node event, signals the brake's judgement when a node
// appeared, went or changed readiness, and re-examines the terminating pods
// of a node that went, or whose readiness or out-of-service taint changed
// (the partition rule depends on them).
func (c *Controller) OnNode(old, cur *events.NodeState, s State) {
	c.tally.Observe(old, cur)
	if old == nil || cur == nil || (old.Ready == "True") != (cur.Ready == "True") {
		select {
		case c.recount <- struct{}{}:
		default: // a recount is already pending
		}
	}
	if old == nil {
		return // a new node: no pod was held because of it
	}
	if cur != nil && old.Ready == cur.Ready && old.HasTaint(events.TaintOutOfService) == cur.HasTaint(events.TaintOutOfService) &&
		timeEqual(old.ReadySince, cur.ReadySince) {
		return
	}
	for _, p := range s.Pods() {
		if p.NodeName == old.Name && p.DeletionTimestamp != nil && c.relevant(p) {
			c.queue.Add(key(p.Namespace, p.Name))
		}
	}
}

// countNodes counts every node afresh and judges the brake.
func (c *Controller) countNodes(s State) {
	c.tally.Reset(s)
	c.judgeBrake(s)
}

// judgeBrake engages or releases the brake on the tally's count. A release
// re-examines every candidate, so the pods it held are handled. Only Run's
// loop calls it.
func (c *Controller) judgeBrake(s State) {
	n, _ := c.tally.Count()
	braking := c.policy.Braking(n)
	was := c.braking
	c.braking = braking
	c.metrics.NodesNotReady.Set(float64(n.NotReady))
	if braking == was {
		return
	}
	if braking {
		c.metrics.Brake.Set(1)
		c.log.Warn().Int("notReady", n.NotReady).Int("nodes", n.Nodes).Float64("share", c.policy.BrakeNotReadyShare).
			Msg("mass-failure brake on: too many nodes are not Ready, force deletions are paused")
		return
	}
	c.metrics.Brake.Set(0)
	c.log.Info().Int("notReady", n.NotReady).Int("nodes", n.Nodes).
		Msg("mass-failure brake released: force deletions resume")
	c.EnqueueAll(s)
}

// NodeCount is the node count now.
func (c *Controller) NodeCount() NodeCount {
	n, _ := c.tally.Count()
	return n
}

func timeEqual(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// EnqueueAll adds every mirrored candidate pod (after the initial load and on every tick).
func (c *Controller) EnqueueAll(s State) {
	for _, p := range s.Pods() {
		if c.relevant(p) {
			c.queue.Add(key(p.Namespace, p.Name))
		}
	}
}

// Run processes the queue with the configured workers and enqueues every pod
// each interval, until ctx ends. The caller starts it once the mirror is synced.
// The nodes are counted before the first worker starts: the mirror's load
// has queued the candidates already (OnPod), and a worker deciding before
// the count would see no nodes, hence no brake, and force-delete while most
// of the cluster is not Ready.
func (c *Controller) Run(ctx context.Context, s State) {
	defer c.queue.ShutDown()
	c.countNodes(s)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.processNext(ctx, s) {
			}
		}()
	}
	c.EnqueueAll(s)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			c.queue.ShutDown()
			wg.Wait()
			return
		case <-c.recount:
			c.judgeBrake(s)
		case <-tick.C:
			c.EnqueueAll(s)
		}
	}
}

func (c *Controller) processNext(ctx context.Context, s State) bool {
	k, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(k)
	out, err := c.sync(ctx, s, k)
	if ctx.Err() != nil {
		return true // leadership ended: the next leader re-examines everything
	}
	if err != nil {
		c.log.Warn().Err(err).Str("pod", k).Msg("cleanup failed; will retry")
	}
	actuate.Requeue(c.queue, k, out, err)
	return true
}

// sync decides on one pod and hands acting decisions to the actuator.
func (c *Controller) sync(ctx context.Context, s State, k string) (Outcome, error) {
	ns, name, _ := strings.Cut(k, "/")
	p, ok := s.Pod(ns, name)
	if !ok {
		return Outcome{}, nil
	}
	// A removal of this pod in doubt is settled first, whatever the pod's
	// decision is now: a pod whose lost write made it Terminating decides
	// Wait, and one that changed may decide None, and neither reaches Handle.
	if settled, out, err := c.act.resolve(ctx, p.UID); settled {
		return out, err
	}
	nodes, counted := c.tally.Count()
	if !counted {
		// Fail safe: without a count the brake cannot hold (Run counts
		// before its workers start, so only a caller that skipped Run gets here).
		return Outcome{Retry: true}, nil
	}
	f := Facts{Now: c.now(), Nodes: nodes, Tally: c.tally}
	if p.NodeName != "" {
		f.Node, _ = s.Node(p.NodeName)
	}
	d := c.policy.Decide(p, f)
	switch d.Action {
	case None:
		return Outcome{}, nil
	case Wait:
		return Outcome{RequeueAfter: d.Until.Sub(f.Now)}, nil
	}
	out, err := c.act.Handle(ctx, p, d, f)
	if d.Action == Skip && !d.Until.IsZero() && err == nil && !out.Retry && out.RequeueAfter == 0 {
		out.RequeueAfter = d.Until.Sub(f.Now) // a hold that ends by time alone (statefulNotReadyTimeout)
	}
	return out, err
}

func key(namespace, name string) string { return namespace + "/" + name }

package cleanup

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/shared/events"
)

// State is the part of the KUBE mirror the controller reads.
type State interface {
	Pod(namespace, name string) (*events.PodState, bool)
	Node(name string) (*events.NodeState, bool)
	Pods() []*events.PodState
}

// Controller turns mirror changes and a reconcile tick into decisions. Pod
// keys (namespace/name) go through one rate-limited delaying workqueue, so a
// pod is never handled by two workers at once, repeated changes collapse into
// one visit, and a pod that becomes due later (minAge, terminatingTimeout, rate
// limit) is scheduled with AddAfter rather than waiting for the next tick.
type Controller struct {
	policy   Policy
	act      *Actuator
	queue    workqueue.TypedRateLimitingInterface[string]
	interval time.Duration
	workers  int
	now      func() time.Time
	log      zerolog.Logger
}

// NewController builds a controller; Run starts it.
func NewController(policy Policy, act *Actuator, interval time.Duration, workers int, now func() time.Time, log zerolog.Logger) *Controller {
	if now == nil {
		now = time.Now
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 5*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "cleanup"})
	return &Controller{policy: policy, act: act, queue: q, interval: interval, workers: workers, now: now, log: log}
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
	return p != nil && c.policy.Decide(p, nil, c.now()).Action != None
}

// OnNode re-examines the terminating pods of a node whose readiness changed
// (the StatefulSet rule depends on it).
func (c *Controller) OnNode(old, cur *events.NodeState, s State) {
	if old == nil || cur == nil || old.Ready == cur.Ready {
		return
	}
	for _, p := range s.Pods() {
		if p.NodeName == cur.Name && p.DeletionTimestamp != nil && c.relevant(p) {
			c.queue.Add(key(p.Namespace, p.Name))
		}
	}
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
func (c *Controller) Run(ctx context.Context, s State) {
	defer c.queue.ShutDown()
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
	switch {
	case out.Retry:
		c.queue.AddRateLimited(k)
	case out.RequeueAfter > 0:
		c.queue.Forget(k)
		c.queue.AddAfter(k, out.RequeueAfter)
	default:
		c.queue.Forget(k)
	}
	return true
}

// sync decides on one pod and hands acting decisions to the actuator.
func (c *Controller) sync(ctx context.Context, s State, k string) (Outcome, error) {
	ns, name, _ := strings.Cut(k, "/")
	p, ok := s.Pod(ns, name)
	if !ok {
		return Outcome{}, nil
	}
	var node *events.NodeState
	if p.NodeName != "" {
		node, _ = s.Node(p.NodeName)
	}
	now := c.now()
	d := c.policy.Decide(p, node, now)
	switch d.Action {
	case None:
		return Outcome{}, nil
	case Wait:
		return Outcome{RequeueAfter: d.Until.Sub(now)}, nil
	}
	return c.act.Handle(ctx, p, d)
}

func key(namespace, name string) string { return namespace + "/" + name }

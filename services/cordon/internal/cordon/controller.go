package cordon

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

// NodeSource is the part of the KUBE mirror the controller reads.
type NodeSource interface {
	Node(name string) (*events.NodeState, bool)
	Nodes() []*events.NodeState
}

// Controller turns mirror changes and the reconcile tick into node
// reconciliations. Handlers only enqueue node names; one worker reconciles
// them one at a time (the rate limit and the cap serialise writes anyway,
// and deciding on the mirror costs microseconds).
type Controller struct {
	nodes    NodeSource
	policy   Policy
	ledger   *Ledger
	fleet    FleetCounter
	act      *Actuator
	changes  *Changes
	queue    workqueue.TypedRateLimitingInterface[string]
	interval time.Duration
	m        *Metrics
	log      zerolog.Logger
}

// NewController builds a controller that works from the node names the
// mirror's handler queues in changes and hands decisions to act. It counts
// the fleet with the actuator's counter (from the mirror, and from the API
// at leadership start).
func NewController(nodes NodeSource, changes *Changes, policy Policy, ledger *Ledger, act *Actuator, interval time.Duration, m *Metrics, log zerolog.Logger) *Controller {
	return &Controller{
		nodes: nodes, policy: policy, ledger: ledger, fleet: act.fleet, act: act,
		interval: interval, m: m, log: log, changes: changes, queue: changes.queue,
	}
}

// EnqueueAll queues every node (the reconcile tick, and once after sync).
func (c *Controller) EnqueueAll() {
	for _, n := range c.nodes.Nodes() {
		c.queue.Add(n.Name)
	}
}

// Fleet counts, from the mirror and the ledger, the nodes counting toward
// the cap and the managed nodes.
func (c *Controller) Fleet() Fleet { return c.fleet.Mirror("") }

// Run works until ctx ends. The caller must have waited for the mirror to
// sync: the cap is only meaningful on the whole fleet.
func (c *Controller) Run(ctx context.Context) error {
	if c.act == nil {
		return errors.New("cordon controller has no actuator")
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	go c.tick(ctx)
	// The mirror may be stale (a lagging or stopped watcher): learn from the
	// API which nodes carry opswire's mark before the first decision, so a new
	// leader holds on to its predecessor's marks and counts them.
	// A consistent read: this replica's API server may have a watch cache
	// behind the previous leader's last write; its version is the floor of
	// every later count of the term.
	f, err := c.fleet.Live(ctx, "", "")
	if err != nil {
		c.log.Warn().Err(err).Msg("could not count the fleet from the API at start; every new cordon reads it consistently first")
		f = c.Fleet()
	} else {
		c.log.Info().Int("marked", f.Marks).Int("outOfService", f.Held).Int("managed", f.Managed).Msg("fleet counted from the API")
		c.act.StartTerm(f)
	}
	c.m.Held.Set(float64(f.Marks))
	c.EnqueueAll()
	for c.processNext(ctx) {
	}
	c.act.EndTerm()
	return nil
}

func (c *Controller) tick(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.EnqueueAll()
			c.m.Held.Set(float64(c.Fleet().Marks))
		}
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	out, err := c.reconcile(ctx, name)
	if ctx.Err() != nil {
		return true // leadership ended or shutdown: nothing more may happen
	}
	if err != nil {
		c.log.Warn().Err(err).Str("node", name).Msg("reconcile failed; requeued with backoff")
	}
	actuate.Requeue(c.queue, name, out, err)
	return true
}

// reconcile decides on the mirror's state of one node and hands anything
// but "nothing to do" to the actuator.
func (c *Controller) reconcile(ctx context.Context, name string) (actuate.Outcome, error) {
	c.m.Reconciles.Inc()
	if c.changes.takeDeleted(name) {
		c.ledger.Forget(name)
		c.act.Forget(name)
	}
	n, ok := c.nodes.Node(name)
	if !ok {
		return actuate.Outcome{}, nil
	}
	n, marked := c.ledger.View(c.policy, n)
	d := Evaluate(c.policy, n, marked)
	c.log.Debug().Str("node", name).Str("action", string(d.Action)).Str("code", d.Code).Int("pods", n.Pods).Msg("evaluated")
	if d.Action == ActionUncordon {
		if wait := c.changes.departuresPending(name); wait > 0 {
			// The count fell by more than the departures the watcher has
			// counted: the next state may show the last pods evicted (a
			// drain to hand over, not a node to release).
			c.m.Postponed.Inc()
			c.log.Debug().Str("node", name).Int("pods", n.Pods).Int("departed", n.Departed).Dur("wait", wait).
				Msg("release postponed: departures not counted yet")
			return actuate.Outcome{RequeueAfter: min(wait, time.Second)}, nil
		}
	}
	out, err := c.act.Apply(ctx, n, marked, d)
	if d.Action != ActionNone {
		c.m.Held.Set(float64(c.Fleet().Marks))
	}
	return out, err
}

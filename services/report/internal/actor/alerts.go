package actor

import (
	"context"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/services/report/internal/images"
	"github.com/opswire/opswire/services/report/internal/store"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
)

// alertPublishTimeout bounds one alert publish (then it is requeued with backoff).
const alertPublishTimeout = 30 * time.Second

// alerter decides image-storage alerts, one node at a time. Node snapshots
// only queue the node's name (deduplicated by the workqueue); the worker
// reads the latest state, so a burst of updates costs one decision.
//
// The memory is keyed by node UID: a node deleted and re-created under the
// same name is a new node and starts afresh. A node's memory is dropped when
// its tombstone arrives (the mirror no longer holds it, or holds another UID
// under the name).
type alerter struct {
	a      *Actor
	q      workqueue.TypedRateLimitingInterface[string]
	mirror *kubestate.Mirror
	st     *store.Store
	mem    map[string]images.Memory // by node UID; owned by the worker goroutine
}

func (al *alerter) run(ctx context.Context) {
	go func() { <-ctx.Done(); al.q.ShutDown() }()
	for {
		name, quit := al.q.Get()
		if quit {
			return
		}
		al.process(ctx, name)
		al.q.Done(name)
	}
}

func (al *alerter) process(ctx context.Context, name string) {
	a := al.a
	n, ok := al.mirror.Node(name)
	uid := ""
	if ok {
		uid = n.UID
	}
	al.forgetOthers(ctx, name, uid)
	if !ok {
		al.q.Forget(name)
		return
	}
	prev := al.mem[uid]
	now := a.now()
	d := images.Decide(n, prev, a.thresholds, now)
	if d.Reason != "" {
		if err := al.publish(ctx, n, d, prev, now); err != nil {
			// The memory is unchanged, so the retry decides the same alert
			// with the same id.
			a.m.alertFailures.Inc()
			a.log.Error().Err(err).Str("node", name).Msg("image alert not published; retrying")
			al.q.AddRateLimited(name)
			return
		}
	}
	if d.Changed {
		d.Memory.Node, d.Memory.UID = n.Name, uid
		al.mem[uid] = d.Memory
		if err := al.st.SaveImageMemory(ctx, uid, d.Memory); err != nil {
			a.m.storeErrors.WithLabelValues("images").Inc()
			a.log.Warn().Err(err).Str("node", name).Msg("cannot store image alert memory; a restart may alert again")
		}
	}
	al.q.Forget(name)
	if d.RecheckAfter > 0 {
		al.q.AddAfter(name, d.RecheckAfter)
	}
}

// forgetOthers drops the memory of every node once named name that is not
// the node uid (the deleted one, or the one a re-created node replaced).
func (al *alerter) forgetOthers(ctx context.Context, name, uid string) {
	for id, m := range al.mem {
		if m.Node != name || id == uid {
			continue
		}
		delete(al.mem, id)
		if err := al.st.DeleteImageMemory(ctx, id); err != nil {
			al.a.m.storeErrors.WithLabelValues("images").Inc()
			al.a.log.Warn().Err(err).Str("node", name).Str("uid", id).Msg("cannot forget a deleted node")
		}
	}
}

func (al *alerter) publish(ctx context.Context, n *events.NodeState, d images.Decision, prev images.Memory, now time.Time) error {
	a := al.a
	payload := images.Alert(n, d, prev, a.thresholds, a.cfg.ImageAlert.MsgTitle, now)
	id := images.AlertID(n, d.Reason, now)
	ev, err := envelope.New(id, envelope.Source(a.cluster, Service), events.TypeImageAlert, n.Name, payload, now)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, alertPublishTimeout)
	defer cancel()
	ack, err := natsx.PublishEventWith(pctx, a.js, subject.Ops(a.cluster, Service, "images", n.Name), ev, publishAttempt, natsx.UnverifiedStands)
	if err != nil {
		return err
	}
	a.m.alerts.WithLabelValues(d.Reason).Inc()
	a.log.Warn().Str("node", n.Name).Str("reason", d.Reason).Int64("imageBytes", n.ImageBytes).
		Float64("percent", d.Percent).Bool("imagesTruncated", n.ImagesTruncated).Bool("duplicate", ack.Duplicate).
		Str("id", id).Msg("node image storage alert")
	return nil
}

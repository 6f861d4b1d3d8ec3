package actor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/opswire/opswire/services/report/internal/restarts"
	"github.com/opswire/opswire/services/report/internal/store"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
)

// Triggers of a report (metric label).
const (
	triggerSchedule = "schedule"
	triggerRequest  = "request"
)

// headerRoom is left in the message for the CloudEvents headers.
const headerRoom = 4 << 10

// ScheduledID is the id of the report of one schedule tick: the same on every
// replica, so JetStream stores one report per tick whoever sends it. It names
// the cluster because clusters on one NATS system share its OPS stream, which
// deduplicates Nats-Msg-Id across all its subjects, and clusters often share
// a schedule: with the tick alone, each tick's second report would be
// answered as a duplicate of the first cluster's, taken by PublishEvent for
// a foreign message suppressing it, and republished under a fallback id,
// logged and counted as suppressed.
func ScheduledID(cluster string, tick time.Time) string {
	return "report/" + cluster + "/restarts/" + tick.UTC().Format(time.RFC3339)
}

// requestID is the id of an on-demand report; unique per request.
func requestID(at time.Time) string {
	return "report/restarts/run/" + at.UTC().Format("20060102T150405.000Z") + "-" + nuid.Next()
}

// requestWait bounds how long an on-demand report waits for a running one.
const requestWait = 10 * time.Second

// recordTimeout bounds the KV writes that record a stored report; they
// outlive the leader term by at most this (see run).
const recordTimeout = 5 * time.Second

// catchUpTimeout bounds the wait for the mirror to apply what KUBE holds.
const catchUpTimeout = 5 * time.Second

// reporter builds and publishes restart reports for the leader.
type reporter struct {
	a      *Actor
	mirror *kubestate.Mirror
	st     *store.Store
	// sizes of the reports stored in OPS, oldest first (the budget ledger);
	// guarded by the Actor's run slot.
	sizes []int
}

// result of one report run.
type result struct {
	Report    events.RestartReport
	Duplicate bool
}

// run builds the report of tick from the current state and stores it in OPS.
// Scheduled runs then advance the increase-mode baseline and record the tick;
// on-demand runs change nothing, so they never shift what the next scheduled
// report counts from.
func (r *reporter) run(ctx context.Context, tick time.Time, onDemand bool) (result, error) {
	a := r.a
	wait := ctx
	if onDemand {
		// A scheduled report retrying through an outage holds the slot for
		// up to catchUp: a request waits a little, then answers.
		var cancel context.CancelFunc
		wait, cancel = context.WithTimeout(ctx, requestWait)
		defer cancel()
	}
	if err := a.lockRun(wait); err != nil {
		return result{}, fmt.Errorf("another report is being stored (a scheduled one may be retrying until NATS accepts it): %w", err)
	}
	defer a.unlockRun()
	trigger, id := triggerSchedule, ScheduledID(a.cluster, tick)
	if onDemand {
		trigger, id = triggerRequest, requestID(tick)
	}
	// Report on everything the watcher had stored when the run started, not
	// on whatever the mirror happened to have applied by then.
	cctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	if err := r.mirror.CatchUp(cctx); err != nil {
		a.log.Warn().Err(err).Msg("restart report: KUBE not fully caught up; reporting on the state held")
	}
	cancel()
	pods := r.mirror.Pods()
	rep := restarts.Build(pods, a.baseline, a.opts, tick)
	rep.ID, rep.OnDemand = id, onDemand
	data, err := fitPayload(&rep, a.maxPayload-headerRoom)
	if err == nil {
		data, err = r.fitBudget(ctx, &rep, data, onDemand)
	}
	if err != nil {
		outcome := "failed"
		if errors.As(err, new(errOverBudget)) {
			outcome = "overbudget"
		}
		a.m.reports.WithLabelValues(trigger, outcome).Inc()
		return result{}, err
	}
	ev := envelope.Event{
		ID: id, Source: envelope.Source(a.cluster, Service), Type: events.TypeRestartReport,
		Subject: "restarts", Time: a.now(), Data: data,
	}
	pub := &connectedPublisher{js: a.js}
	ack, err := natsx.PublishEventWith(ctx, pub, subject.Ops(a.cluster, Service, "restarts"), ev, publishAttempt, natsx.UnverifiedStands)
	if err != nil {
		a.m.reports.WithLabelValues(trigger, "failed").Inc()
		return result{}, fmt.Errorf("publish report %s: %w", id, err)
	}
	outcome := "sent"
	if ack.Duplicate && pub.attempts == 1 {
		// Stored before by someone else: another replica, or an earlier run.
		// After a retry, the duplicate is most likely this run's own earlier
		// attempt, stored although its ack was lost: still this run's store.
		outcome = "duplicate"
	}
	a.m.reports.WithLabelValues(trigger, outcome).Inc()
	// The report is in OPS: recording it (size, baseline, tick) must not be
	// lost to the leader term ending at this moment (shutdown, lease lost),
	// or the next leader finds a tick stored but not recorded. The writes get
	// their own short deadline instead of the term's context.
	rctx, cancelRecord := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancelRecord()
	if outcome == "sent" {
		r.recordSize(rctx, len(data))
	}
	a.m.rows.Observe(float64(len(rep.Rows)))
	a.m.offenders.Set(float64(rep.Offenders))
	a.log.Info().Str("id", id).Str("outcome", outcome).Int("rows", len(rep.Rows)).Int("offenders", rep.Offenders).
		Int("podsSeen", rep.PodsSeen).Int64("restarts", rep.Restarts).Msg("restart report stored in OPS")
	if onDemand {
		return result{Report: rep, Duplicate: ack.Duplicate}, nil
	}
	switch {
	case a.opts.Mode != config.ReportModeIncrease:
	case outcome == "duplicate":
		// OPS holds another run's report of this tick (a leader stopped
		// between storing it and recording it, so this one caught it up):
		// built from that run's state, not from the counts in hand. Taking
		// them as the baseline would drop, unreported, whatever was gained
		// between that run and now; keeping the baseline makes the next
		// report count from its time instead (it may list again what the
		// stored report listed: over-report, never under-report).
		a.log.Info().Str("id", id).Time("since", baselineTime(a.baseline)).
			Msg("this tick's report was already in OPS from another run; the baseline is kept, the next report counts from it")
	default:
		next := restarts.Snapshot(pods, tick)
		if err := r.st.SaveBaseline(rctx, next, a.saved); err != nil {
			a.m.storeErrors.WithLabelValues("baseline").Inc()
			a.log.Error().Err(err).Msg("could not store the restart baseline; the next save rewrites it in full, a new leader before then may count from an older one")
			a.saved = restarts.Unknown(a.saved, next)
		} else {
			a.saved = next
		}
		a.baseline = next
	}
	if err := r.st.SetLastTick(rctx, tick); err != nil {
		a.m.storeErrors.WithLabelValues("tick").Inc()
		a.log.Warn().Err(err).Msg("could not record the tick; a new leader may resend it (deduplicated)")
	}
	a.m.lastTick.Set(float64(tick.Unix()))
	return result{Report: rep, Duplicate: ack.Duplicate}, nil
}

// baselineTime is when b was taken; zero for no baseline (counts from pod start).
func baselineTime(b *restarts.Baseline) time.Time {
	if b == nil {
		return time.Time{}
	}
	return b.Time
}

// connectedPublisher publishes only while connected, and counts attempts.
// A publish made while disconnected is buffered by nats.go and sent on
// reconnect: each timed-out attempt would add one more copy to the buffer.
// They are all dropped as duplicates, but the ack of the attempt that
// finally succeeds then says "duplicate" for the report this run stored.
type connectedPublisher struct {
	js       jetstream.JetStream
	attempts int
}

func (p *connectedPublisher) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if nc := p.js.Conn(); nc != nil {
		for !nc.IsConnected() {
			if nc.IsClosed() {
				return nil, nats.ErrConnectionClosed
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting for NATS: %w", nats.ErrConnectionReconnecting)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	p.attempts++
	return p.js.PublishMsg(ctx, msg, opts...)
}

// Stream lets natsx.PublishEvent read back the message a duplicate ack
// points at (is the id held by this report, or by a foreign message?).
func (p *connectedPublisher) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	return p.js.Stream(ctx, name)
}

// fitPayload encodes the report, cutting rows (the least restarting first)
// until it fits in limit bytes. The summary counts stay those of the whole
// report and Truncated says how many rows were left out.
func fitPayload(rep *events.RestartReport, limit int) ([]byte, error) {
	for {
		data, err := envelope.Marshal(rep)
		if err != nil {
			return nil, fmt.Errorf("encode report: %w", err)
		}
		if len(data) <= limit {
			return data, nil
		}
		if len(rep.Rows) == 0 {
			return nil, errors.New("report does not fit in a NATS message even without rows")
		}
		keep := int(float64(len(rep.Rows)) * float64(limit) / float64(len(data)) * 0.9)
		if keep >= len(rep.Rows) {
			keep = len(rep.Rows) - 1
		}
		rep.Truncated += len(rep.Rows) - keep
		rep.Rows = rep.Rows[:keep]
	}
}

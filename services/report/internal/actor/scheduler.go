package actor

import (
	"context"
	"time"
)

// runSchedule sends one report per tick until ctx ends. A tick that cannot
// be stored (NATS down) is retried until its deadline (tick+catchUp, or the
// next tick if that comes first), so a leader that stays leader through an
// outage still stores it once NATS is back.
func (r *reporter) runSchedule(ctx context.Context) {
	a := r.a
	next := a.sched.Next(a.now())
	for ctx.Err() == nil {
		if next.IsZero() {
			a.log.Warn().Str("schedule", a.sched.String()).Msg("the schedule never fires again")
			return
		}
		if !r.waitUntil(ctx, next) {
			return
		}
		r.tick(ctx, next)
		// A run longer than the interval skips the ticks it overran.
		after := a.now()
		if after.Before(next) {
			after = next
		}
		next = a.sched.Next(after)
	}
}

// deadline is when the report of tick is given up: tick+RetryWindow (within
// the dedup window, see config validateWindows), or the next tick if that is
// sooner, since only the latest tick is ever sent late, never a backlog.
func (r *reporter) deadline(tick time.Time) time.Time {
	d := tick.Add(r.a.cfg.SendReport.RetryWindow())
	if following := r.a.sched.Next(tick); !following.IsZero() && following.Before(d) {
		d = following
	}
	return d
}

// catchUp sends the latest tick no replica recorded as sent, if it is at
// most sendReport.catchUp old: a leader lost just before the weekly tick must
// not make the cluster skip a week. If the old leader did send it but died
// before recording it, the report has the same id and JetStream drops it:
// catchUp is validated to stay within the dedup window (nats.duplicates).
func (r *reporter) catchUp(ctx context.Context) {
	a := r.a
	window := a.cfg.SendReport.CatchUp.Duration
	if window <= 0 {
		return
	}
	last, ok, err := r.st.LastTick(ctx)
	if err != nil {
		a.m.storeErrors.WithLabelValues("tick").Inc()
		a.log.Warn().Err(err).Msg("cannot read the last tick; no catch-up")
		return
	}
	if !ok {
		return // never sent a scheduled report: nothing was missed
	}
	now := a.now()
	from := now.Add(-window)
	if last.After(from) {
		from = last
	}
	if missed, found := a.sched.Latest(from, now); found {
		a.log.Info().Time("tick", missed).Msg("catching up a tick no replica recorded as sent")
		r.tick(ctx, missed)
	}
}

// tick stores the report of one tick, retrying until its deadline.
func (r *reporter) tick(ctx context.Context, tick time.Time) {
	deadline := r.deadline(tick)
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if _, err := r.run(tctx, tick, false); err != nil && ctx.Err() == nil {
		r.a.m.missed.Inc()
		r.a.log.Error().Err(err).Time("tick", tick).Time("deadline", deadline).
			Msg("scheduled restart report not stored by its deadline: this tick has no report")
	}
}

// waitUntil sleeps until the wall clock reaches t; false when ctx ended.
// It re-checks the clock after waking, so a wall-clock step back (NTP) cannot
// make a tick fire early.
func (r *reporter) waitUntil(ctx context.Context, t time.Time) bool {
	for {
		d := t.Sub(r.a.now())
		if d <= 0 {
			return true
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return false
		case <-timer.C:
		}
	}
}

package actor

import (
	"context"
	"time"
)

// runSchedule sends one report per tick after from until ctx ends. A tick
// that cannot be stored (NATS down) is retried until its deadline (tick+
// catchUp, or the next tick if that comes first), so a leader that stays
// leader through an outage still stores it once NATS is back.
//
// It moves on from the last tick it handled, not from the clock: ticks that
// came due while a tick was retried up to its deadline (or while catch-up
// ran, or the process stalled) are not skipped silently. The latest of them
// runs if its deadline has not passed, and every other one is counted in
// ticks_missed_total, like a tick given up at its deadline.
func (r *reporter) runSchedule(ctx context.Context, from time.Time) {
	a := r.a
	last := from
	for ctx.Err() == nil {
		next := a.sched.Next(last)
		if next.IsZero() {
			a.log.Warn().Str("schedule", a.sched.String()).Msg("the schedule never fires again")
			return
		}
		if !r.waitUntil(ctx, next) {
			return
		}
		tick, run := r.due(last, next)
		if run {
			r.tick(ctx, tick)
		}
		last = tick
	}
}

// due picks the tick to run once next (the first tick after last) has come:
// the latest tick in (last, now], which is next unless the clock is already
// past the ticks after it. The ticks before it are counted as missed, and so
// is it when its own deadline has passed too (run false).
func (r *reporter) due(last, next time.Time) (tick time.Time, run bool) {
	a := r.a
	now := a.now()
	tick, ok := a.sched.Latest(last, now)
	if !ok || tick.Before(next) {
		tick = next // the clock stepped back after waitUntil
	}
	skipped := 0
	for t := next; !t.IsZero() && t.Before(tick); t = a.sched.Next(t) {
		skipped++
	}
	run = r.deadline(tick).After(now)
	if !run {
		skipped++
	}
	if skipped > 0 {
		a.m.missed.Add(float64(skipped))
		a.log.Error().Int("ticks", skipped).Time("after", last).Time("latest", tick).Bool("latestRuns", run).
			Msg("scheduled ticks came and went while an earlier tick was retried or the leader stalled: these ticks have no report")
	}
	return tick, run
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
// It considers the ticks up to now, the moment the schedule runs the ticks
// after (runSchedule's from), so each tick is one or the other's.
func (r *reporter) catchUp(ctx context.Context, now time.Time) {
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
	from := now.Add(-window)
	if last.After(from) {
		from = last
	}
	if missed, found := a.sched.Latest(from, now); found {
		a.log.Info().Time("tick", missed).Msg("catching up a tick no replica recorded as sent")
		r.tick(ctx, missed)
	}
}

// tick stores the report of one tick, retrying until its deadline. A tick
// that comes while a pause record holds the actor is not sent: a pause
// silences the scheduled reports (an on-demand report, which a person asks
// for, is still answered). It is not recorded as sent either, so a leader
// that starts within the tick's catch-up window after the pause sends it.
func (r *reporter) tick(ctx context.Context, tick time.Time) {
	if r.a.pause != nil {
		if p, ok := r.a.pause.Paused(); ok {
			r.a.m.paused.Inc()
			r.a.log.Warn().Time("tick", tick).Str("pause", p.String()).Msg("scheduled restart report not sent: paused")
			return
		}
	}
	deadline := r.deadline(tick)
	tctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if _, err := r.run(tctx, tick, false); err != nil && ctx.Err() == nil {
		r.a.m.missed.Inc()
		r.a.log.Error().Err(err).Time("tick", tick).Time("deadline", deadline).
			Msg("scheduled restart report not stored by its deadline: this tick has no report")
	}
}

// wakeEvery bounds how long the scheduler trusts one timer. Timers follow
// the monotonic clock, which stops while the machine is suspended and
// ignores forward steps of the wall clock: one timer armed for a week's wait
// would fire hours after Monday 10:00 on a machine that slept through it,
// past the tick's catch-up window, and the tick would count as missed.
const wakeEvery = time.Minute

// waitUntil sleeps until the wall clock reaches t; false when ctx ended.
// It reads the wall clock at least every wakeEvery, so a tick passed while
// the monotonic clock stood still runs at most that late; and after every
// wake, so a wall-clock step back (NTP) cannot make a tick fire early.
func (r *reporter) waitUntil(ctx context.Context, t time.Time) bool {
	for {
		d := t.Sub(r.a.now())
		if d <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.a.clock.After(min(d, wakeEvery)):
		}
	}
}

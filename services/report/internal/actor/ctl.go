package actor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"

	"github.com/opswire/opswire/shared/subject"
)

// requestRunTimeout bounds an on-demand report, publish included.
const requestRunTimeout = 30 * time.Second

// RunReply answers ctl.<cluster>.report.run.
type RunReply struct {
	ID        string `json:"id,omitempty"`
	Offenders int    `json:"offenders"`
	Rows      int    `json:"rows"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

// serveRequests answers on-demand report requests while leading. Standbys do
// not subscribe, so exactly one replica answers; the queue group makes that
// hold even for a moment of overlap between an old and a new leader.
//
// Every request builds and stores a full report in OPS, so requests are
// bounded: a token bucket (sendReport.requestBurst, then one per
// requestEvery) per leader term, and a request without a reply subject is
// rejected without running: nobody could learn the report's id, and a plain
// publish loop must not be able to fill OPS.
func (a *Actor) serveRequests(ctx context.Context, rep *reporter) (*nats.Subscription, error) {
	subj := subject.Ctl(a.cluster, Service, "run")
	sr := a.cfg.SendReport
	limiter := rate.NewLimiter(rate.Every(sr.RequestEvery.Duration), sr.RequestBurst)
	sub, err := a.nc.QueueSubscribe(subj, "opswire-"+Service, func(m *nats.Msg) {
		if m.Reply == "" {
			a.m.requests.WithLabelValues("noreply").Inc()
			a.log.Warn().Str("subject", subj).Msg("report request without a reply subject ignored; use a request (nats req), not a publish")
			return
		}
		var reply RunReply
		if r := limiter.ReserveN(a.now(), 1); !r.OK() || r.DelayFrom(a.now()) > 0 {
			wait := r.DelayFrom(a.now())
			r.CancelAt(a.now())
			a.m.requests.WithLabelValues("limited").Inc()
			reply.Error = fmt.Sprintf("rate limited: at most %d on-demand reports, then one per %s; retry in %s",
				sr.RequestBurst, sr.RequestEvery.Duration, wait.Round(time.Second))
			a.respond(m, reply)
			return
		}
		a.m.requests.WithLabelValues("run").Inc()
		rctx, cancel := context.WithTimeout(ctx, requestRunTimeout)
		defer cancel()
		res, err := rep.run(rctx, a.now(), true)
		if err != nil {
			reply.Error = err.Error()
			a.log.Error().Err(err).Msg("on-demand restart report failed")
		} else {
			reply = RunReply{ID: res.Report.ID, Offenders: res.Report.Offenders, Rows: len(res.Report.Rows), Duplicate: res.Duplicate}
		}
		a.respond(m, reply)
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subj, err)
	}
	return sub, nil
}

func (a *Actor) respond(m *nats.Msg, reply RunReply) {
	data, _ := json.Marshal(reply)
	if err := m.Respond(data); err != nil {
		a.log.Warn().Err(err).Msg("cannot answer the report request")
	}
}

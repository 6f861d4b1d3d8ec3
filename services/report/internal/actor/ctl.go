package actor

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

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
func (a *Actor) serveRequests(ctx context.Context, rep *reporter) (*nats.Subscription, error) {
	subj := subject.Ctl(a.cluster, Service, "run")
	sub, err := a.nc.QueueSubscribe(subj, "opswire-"+Service, func(m *nats.Msg) {
		rctx, cancel := context.WithTimeout(ctx, requestRunTimeout)
		defer cancel()
		var reply RunReply
		res, err := rep.run(rctx, a.now(), true)
		if err != nil {
			reply.Error = err.Error()
			a.log.Error().Err(err).Msg("on-demand restart report failed")
		} else {
			reply = RunReply{ID: res.Report.ID, Offenders: res.Report.Offenders, Rows: len(res.Report.Rows), Duplicate: res.Duplicate}
		}
		data, _ := json.Marshal(reply)
		if m.Reply == "" {
			return // published without a reply subject: run, but nobody to answer
		}
		if err := m.Respond(data); err != nil {
			a.log.Warn().Err(err).Msg("cannot answer the report request")
		}
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", subj, err)
	}
	return sub, nil
}

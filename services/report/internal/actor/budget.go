package actor

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// msgOverhead is added to a report's body for its subject and headers as
// stored in OPS.
const msgOverhead = 512

// budgetCheckTimeout bounds the look at OPS before a report is stored.
const budgetCheckTimeout = 5 * time.Second

// errOverBudget refuses an on-demand report while reports use up their share
// of OPS (sendReport.opsBudgetBytes).
type errOverBudget struct {
	used, limit int64
	stored      int
}

func (e errOverBudget) Error() string {
	return fmt.Sprintf("report budget used up: OPS holds %d restart reports, about %d of the %d bytes "+
		"(sendReport.opsBudgetBytes) reports may take; on-demand reports resume as old ones age out (nats.opsMaxAge)",
		e.stored, e.used, e.limit)
}

// budgetUsed returns the bytes the cluster's restart reports take in OPS
// now, and how many there are. The count is OPS's own (the stream's
// per-subject state, so reports that aged out or were discarded no longer
// count); the sizes are those recorded when each report was stored, the
// newest last. A report whose size was never recorded (stored before the
// ledger, or by a leader that could not save it) counts as a full message.
func (r *reporter) budgetUsed(ctx context.Context) (int64, int, error) {
	subj := subject.Ops(r.a.cluster, Service, "restarts")
	ctx, cancel := context.WithTimeout(ctx, budgetCheckTimeout)
	defer cancel()
	st, err := r.a.js.Stream(ctx, subject.OpsStream)
	if err != nil {
		return 0, 0, fmt.Errorf("OPS stream: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, 0, fmt.Errorf("OPS stream info: %w", err)
	}
	stored := int(info.State.Subjects[subj])
	if len(r.sizes) > stored {
		r.sizes = r.sizes[len(r.sizes)-stored:] // the oldest are gone from OPS
	}
	used := int64(stored-len(r.sizes)) * int64(r.a.maxPayload)
	for _, n := range r.sizes {
		used += int64(n)
	}
	return used, stored, nil
}

// fitBudget checks a report of data against the budget. An on-demand report
// over it is refused (also when the budget cannot be checked: requests fail
// closed). A scheduled report is never refused: its rows are cut to what is
// left of the budget, down to the summary alone, and when the budget cannot
// be checked (NATS down) it goes as it is.
func (r *reporter) fitBudget(ctx context.Context, rep *events.RestartReport, data []byte, onDemand bool) ([]byte, error) {
	a := r.a
	limit := a.cfg.SendReport.OpsBudgetBytes
	used, stored, err := r.budgetUsed(ctx)
	if err != nil {
		if onDemand {
			return nil, fmt.Errorf("cannot check the report budget: %w", err)
		}
		a.log.Warn().Err(err).Msg("cannot check the report budget; storing the scheduled report as it is")
		return data, nil
	}
	a.m.budgetUsed.Set(float64(used))
	if used+int64(len(data)+msgOverhead) <= limit {
		return data, nil
	}
	if onDemand {
		return nil, errOverBudget{used: used, limit: limit, stored: stored}
	}
	if left := int(limit-used) - msgOverhead; left > 0 {
		if cut, err := fitPayload(rep, left); err == nil {
			a.log.Warn().Int64("used", used).Int64("budget", limit).Int("truncated", rep.Truncated).
				Msg("scheduled report cut to what is left of the report budget in OPS")
			return cut, nil
		}
	}
	rep.Truncated += len(rep.Rows)
	rep.Rows = []events.RestartRow{}
	a.log.Warn().Int64("used", used).Int64("budget", limit).Int("truncated", rep.Truncated).
		Msg("report budget in OPS used up: the scheduled report carries its summary only")
	summary, err := envelope.Marshal(rep)
	if err != nil {
		return nil, fmt.Errorf("encode report: %w", err)
	}
	return summary, nil
}

// recordSize adds a stored report's size to the ledger kept in KV.
func (r *reporter) recordSize(ctx context.Context, bodyBytes int) {
	r.sizes = append(r.sizes, bodyBytes+msgOverhead)
	if err := r.st.SaveReportSizes(ctx, r.sizes); err != nil {
		r.a.m.storeErrors.WithLabelValues("budget").Inc()
		r.a.log.Warn().Err(err).Msg("cannot record the report's size; the budget counts it as a full message")
	}
}

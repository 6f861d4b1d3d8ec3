package actuate

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// How a write in doubt was counted (opswire_actuate_writes_in_doubt_total's
// how): one vocabulary for every actor.
const (
	DoubtUnanswered = "unanswered"  // its answer was lost: in doubt from now on
	DoubtConflict   = "conflict"    // a 409 after the write's first step may have committed
	DoubtApplied    = "applied"     // a read showed the write: audited then
	DoubtNotApplied = "not_applied" // it did not happen (or can no longer): reported failed or handled again
	DoubtUnclear    = "unclear"     // the object moved on without showing it: nothing published
	DoubtGone       = "node_deleted"
	DoubtTermEnded  = "term_ended" // still in doubt when the leader's term ended
)

// WriteMetrics are the metrics of the write path every actor shares, one
// family labelled by actor: opswire_actuate_writes_in_doubt_total{actor,how}
// and opswire_actuate_rate_limited_total{actor}. Each is curried with the
// actor, so an actor counts with WithLabelValues(how) / Inc. The actor's
// previous names stay exposed for one release, read from the same counts
// (legacy), so a dashboard or rule on them keeps working.
type WriteMetrics struct {
	InDoubt     *prometheus.CounterVec // {how}
	RateLimited prometheus.Counter
}

// WriteMetricsLegacy names an actor's previous metrics: the doubt counter's
// name and how its how values were called there (absent: the same), and the
// rate-limit counter's name ("": none).
type WriteMetricsLegacy struct {
	InDoubt     string
	InDoubtHow  map[string]string
	RateLimited string
}

// NewWriteMetrics registers the family for actor on reg (nil: unregistered,
// for tests), with the legacy names, and initialises every how to 0.
func NewWriteMetrics(reg prometheus.Registerer, actor string, legacy WriteMetricsLegacy) *WriteMetrics {
	inDoubt := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opswire_actuate_writes_in_doubt_total",
		Help: "Writes whose answer was lost (how=unanswered; conflict: a 409 after the write's first step may have committed), and how each was settled: applied (audited then), not_applied (reported failed, or handled again), unclear (the object moved on without it: nothing published), node_deleted, term_ended.",
	}, []string{"actor", "how"})
	rateLimited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opswire_actuate_rate_limited_total",
		Help: "Writes postponed by the actor's rate window (the object is requeued, never dropped).",
	}, []string{"actor"})
	m := &WriteMetrics{
		InDoubt:     inDoubt.MustCurryWith(prometheus.Labels{"actor": actor}),
		RateLimited: rateLimited.WithLabelValues(actor),
	}
	for _, how := range []string{DoubtUnanswered, DoubtConflict, DoubtApplied, DoubtNotApplied, DoubtUnclear, DoubtGone, DoubtTermEnded} {
		m.InDoubt.WithLabelValues(how)
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(inDoubt, rateLimited)
	if legacy.InDoubt != "" {
		reg.MustRegister(&renamed{from: inDoubt, desc: prometheus.NewDesc(legacy.InDoubt,
			"Deprecated: opswire_actuate_writes_in_doubt_total{actor=\""+actor+"\"}.", []string{"how"}, nil),
			label: "how", values: legacy.InDoubtHow})
	}
	if legacy.RateLimited != "" {
		reg.MustRegister(&renamed{from: rateLimited, desc: prometheus.NewDesc(legacy.RateLimited,
			"Deprecated: opswire_actuate_rate_limited_total{actor=\""+actor+"\"}.", nil, nil)})
	}
	return m
}

// renamed exposes the counters of from under another name: with label
// (renamed by values) as its one label, or none.
type renamed struct {
	from   prometheus.Collector
	desc   *prometheus.Desc
	label  string
	values map[string]string
}

func (r *renamed) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *renamed) Collect(ch chan<- prometheus.Metric) {
	in := make(chan prometheus.Metric)
	go func() {
		r.from.Collect(in)
		close(in)
	}()
	for m := range in {
		var d dto.Metric
		if m.Write(&d) != nil || d.Counter == nil {
			continue
		}
		if r.label == "" {
			ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, d.Counter.GetValue())
			continue
		}
		for _, lp := range d.Label {
			if lp.GetName() != r.label {
				continue
			}
			v := lp.GetValue()
			if to, ok := r.values[v]; ok {
				v = to
			}
			ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, d.Counter.GetValue(), v)
		}
	}
}

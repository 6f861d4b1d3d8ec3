package cordon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/opswire/opswire/shared/actuate"
)

// Metrics of the cordon actor. Labels are small closed sets.
type Metrics struct {
	Cordons   *prometheus.CounterVec // {mode, dry_run}
	Uncordons *prometheus.CounterVec // {dry_run}
	// Handovers counts drained nodes handed over to the person draining them.
	Handovers *prometheus.CounterVec // {dry_run}
	Refusals  *prometheus.CounterVec // {reason}
	Failures  *prometheus.CounterVec // {action}
	// Stale counts actions dropped because the re-verification against the
	// API no longer agreed with the mirror.
	Stale prometheus.Counter
	// Held is the number of nodes currently carrying opswire's mark.
	Held prometheus.Gauge
	// Postponed counts releases postponed for departures the node's pod
	// count showed before its departure totals (Changes).
	Postponed  prometheus.Counter
	Reconciles prometheus.Counter
	// WritesInDoubt counts writes whose answer was lost (unanswered) and
	// how each was decided (applied, not_applied, unclear, node_deleted):
	// unanswered minus the rest is the write in doubt now, which holds
	// every other cordon write. It is the shared family
	// opswire_actuate_writes_in_doubt_total{actor="cordon"}.
	WritesInDoubt *prometheus.CounterVec // {how}
	// RateLimited is opswire_actuate_rate_limited_total{actor="cordon"}:
	// counted with Refusals{reason="rate-limited"}.
	RateLimited prometheus.Counter
	// RecoveryRejected counts the release Events (OpswireUncordoned,
	// OpswireCordonHandedOver) a new leader's recovery refused because the
	// live node contradicts them (LiveActions), by why: forged.
	RecoveryRejected *prometheus.CounterVec // {why}
}

// rejectedForged: a release Event the live node shows never happened.
const rejectedForged = "forged"

// NewMetrics registers the metrics on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Cordons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cordon_cordons_total", Help: "Nodes cordoned or tainted by opswire (dry_run=true: decided only).",
		}, []string{"mode", "dry_run"}),
		Uncordons: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cordon_uncordons_total", Help: "Nodes released by opswire (dry_run=true: decided only).",
		}, []string{"dry_run"}),
		Handovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cordon_handovers_total", Help: "Drained nodes opswire handed over: mark removed, cordon kept (dry_run=true: decided only).",
		}, []string{"dry_run"}),
		Refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cordon_refusals_total", Help: "Wanted actions not taken, by reason (cap-reached, rate-limited).",
		}, []string{"reason"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cordon_failures_total", Help: "Writes that failed (they are retried with backoff).",
		}, []string{"action"}),
		Stale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_cordon_stale_total", Help: "Actions dropped because the node no longer qualified when re-read from the API.",
		}),
		Held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_cordon_nodes_cordoned",
			Help: "Nodes currently carrying opswire's autocordon mark, including nodes labelled donotcordon since opswire marked them: " +
				"opswire neither releases nor re-applies those (announced once as skipped, code donotcordon-held) until a person acts.",
		}),
		Postponed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_cordon_releases_postponed_total",
			Help: "Release decisions postponed because the node's pod count fell by more than its counted departures (waiting up to 10 s for them).",
		}),
		Reconciles: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_cordon_reconciles_total", Help: "Node reconciliations run.",
		}),
		RecoveryRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cordon_recovery_events_rejected_total",
			Help: "Release Events (uncordon, handover) a new leader's recovery refused because the live node still carries the mark they claim to have removed " +
				"(not published, not counted in the rate window), by why (forged).",
		}, []string{"why"}),
	}
	// The closed label sets start at zero, so rate() and alerts see them
	// before the first event.
	for _, r := range []string{"cap-reached", "rate-limited"} {
		m.Refusals.WithLabelValues(r)
	}
	m.RecoveryRejected.WithLabelValues(rejectedForged)
	w := actuate.NewWriteMetrics(reg, Service, actuate.WriteMetricsLegacy{InDoubt: "opswire_cordon_writes_in_doubt_total"})
	m.WritesInDoubt, m.RateLimited = w.InDoubt, w.RateLimited
	for _, d := range []string{"false", "true"} {
		m.Uncordons.WithLabelValues(d)
		m.Handovers.WithLabelValues(d)
	}
	if reg != nil {
		reg.MustRegister(m.Cordons, m.Uncordons, m.Handovers, m.Refusals, m.Failures, m.Stale, m.Held, m.Postponed, m.Reconciles,
			m.RecoveryRejected)
	}
	return m
}

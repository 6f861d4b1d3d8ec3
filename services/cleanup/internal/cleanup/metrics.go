package cleanup

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/opswire/opswire/shared/actuate"
)

// Metrics of the cleanup actor.
type Metrics struct {
	// Decisions counts published decisions by verb and reason (skips once per pod and reason).
	Decisions *prometheus.CounterVec
	// Deferred counts deletions postponed by the rate limit (the pod is
	// requeued, never dropped): opswire_actuate_rate_limited_total{actor="cleanup"}.
	Deferred prometheus.Counter
	// Rechecks counts writes abandoned by the live re-check, by why (gone, recreated, changed).
	Rechecks *prometheus.CounterVec
	// APIErrors counts failed API calls by operation.
	APIErrors *prometheus.CounterVec
	// Brake is 1 while the mass-failure brake pauses force deletions.
	Brake prometheus.Gauge
	// NodesNotReady is the number of nodes not Ready at the last count.
	NodesNotReady prometheus.Gauge
	// ClockSkew is the local clock minus the API server's, in seconds.
	ClockSkew prometheus.Gauge
	// JournalEvents counts removals journaled as a CleanupIntent Event
	// because OPS did not store their intent in time.
	JournalEvents prometheus.Counter
	// RecoveryRejected counts removal Events a new leader refused to read
	// (LiveActions), by why: forged (the decision names another pod than
	// the Event's involvedObject, a verb the Event's reason does not carry,
	// or a name no pod can have) or invalid (unreadable annotations, an
	// action time in the future, a pod re-read the API refuses as a bad
	// request); each Event once.
	RecoveryRejected *prometheus.CounterVec
	// InDoubt counts removal writes whose answer was lost (unanswered, or
	// conflict) and how they were settled (applied, not_applied):
	// opswire_actuate_writes_in_doubt_total{actor="cleanup"}.
	InDoubt *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cleanup_decisions_total",
			Help: "Cleanup decisions published to OPS, by verb (deleted, forcedeleted, skipped, dryrun, failed) and reason.",
		}, []string{"verb", "reason"}),
		Rechecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cleanup_recheck_abandoned_total",
			Help: "Deletions abandoned because the live pod no longer qualified, by why.",
		}, []string{"why"}),
		APIErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cleanup_api_errors_total",
			Help: "Failed Kubernetes API calls, by operation.",
		}, []string{"op"}),
		Brake: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_cleanup_brake_engaged",
			Help: "1 while more than delException.brakeNotReadyShare of the nodes is not Ready: force deletions are paused.",
		}),
		NodesNotReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_cleanup_nodes_not_ready",
			Help: "Nodes not Ready at the last count (for the mass-failure brake).",
		}),
		ClockSkew: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_cleanup_clock_skew_seconds",
			Help: "Local clock minus the API server's (from response Date headers); decisions use the API server's time.",
		}),
		JournalEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_cleanup_journal_events_total",
			Help: "Removals whose intent OPS did not store in time, journaled instead as a CleanupIntent Event through the API before the write.",
		}),
		RecoveryRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_cleanup_recovery_events_rejected_total",
			Help: "Removal Events refused by a new leader's recovery (not counted, nothing published), by why (forged, invalid).",
		}, []string{"why"}),
	}
	w := actuate.NewWriteMetrics(reg, Service, actuate.WriteMetricsLegacy{
		InDoubt:     "opswire_cleanup_writes_in_doubt_total",
		InDoubtHow:  map[string]string{actuate.DoubtApplied: "happened", actuate.DoubtNotApplied: "not_happened"},
		RateLimited: "opswire_cleanup_rate_limited_total",
	})
	m.InDoubt, m.Deferred = w.InDoubt, w.RateLimited
	if reg != nil {
		reg.MustRegister(m.Decisions, m.Rechecks, m.APIErrors, m.Brake, m.NodesNotReady, m.ClockSkew, m.JournalEvents,
			m.RecoveryRejected)
	}
	return m
}

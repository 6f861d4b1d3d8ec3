package actuate

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the shared write path. Each process runs one actor, so the
// names carry no service label; Prometheus' job label tells them apart.
type Metrics struct {
	// AuditBacklog is the number of OPS messages waiting to be stored
	// (including the one being published).
	AuditBacklog prometheus.Gauge
	// AuditStored counts publish acknowledgements: each audit message once,
	// and a message published twice twice (the stream would hide it).
	AuditStored prometheus.Counter
	// AuditRetries counts failed publish attempts (each is retried).
	AuditRetries prometheus.Counter
	// AuditDropped counts messages given up: a permanent publish error, or
	// still queued when the process stopped.
	AuditDropped prometheus.Counter
	// AuditLateFound counts messages queued past half the duplicate window
	// that OPS held already (the next leader completed them): not stored
	// again.
	AuditLateFound prometheus.Counter
	// WindowSeeded is the number of actions the rate window found in OPS at
	// the start of this leadership term.
	WindowSeeded prometheus.Gauge
	// Intents counts write-ahead intents by result: journaled (stored
	// before the write), unjournaled (not stored in time: the write went
	// ahead without one), answered / answer_unstored (an attempt's answer
	// record, NewAnswer, stored or not), and at leadership start completed (the write
	// happened, its outcome audit was missing and is published now), done
	// (the outcome is in OPS), pending (the object is unchanged: no write),
	// rebuilt (shown by the API, unknown to OPS: outcome rebuilt, published).
	Intents *prometheus.CounterVec
	// Recovering is 1 while a new leader reads OPS and the API before its
	// first action (SeedAndRecover) and 0 once it acts; a value stuck at 1
	// means the leader is not acting (see RecoveryFailures and the log).
	Recovering prometheus.Gauge
	// RecoveryFailures counts failed recovery attempts (each is retried):
	// OPS unreadable, a LIST that times out, a permission missing (403).
	RecoveryFailures prometheus.Counter
}

// NewMetrics registers the metrics on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		AuditBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_audit_backlog", Help: "OPS audit messages waiting to be stored (kept and retried until stored).",
		}),
		AuditStored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_audit_stored_total", Help: "OPS audit messages acknowledged by the stream (each publish counted).",
		}),
		AuditRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_audit_retries_total", Help: "Failed OPS publish attempts (retried with the same Nats-Msg-Id).",
		}),
		AuditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_audit_dropped_total", Help: "OPS audit messages given up (permanent error, or unsent at shutdown).",
		}),
		AuditLateFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_audit_late_found_total", Help: "Audit messages queued past half the duplicate window found in OPS already (completed by the next leader): not stored again.",
		}),
		WindowSeeded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_rate_window_seeded_actions", Help: "Actions of the current rate window found in OPS when this leader started.",
		}),
		Intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_intents_total", Help: "Write-ahead intents by result (journaled, unjournaled; answered, answer_unstored: an attempt's answer record; at leadership start: completed, done, pending, rebuilt).",
		}, []string{"result"}),
		Recovering: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_recovering", Help: "1 while a new leader recovers its rate window and missing audits (no action until done).",
		}),
		RecoveryFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_recovery_failures_total", Help: "Failed recovery attempts of a new leader (retried; no action until one succeeds).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.AuditBacklog, m.AuditStored, m.AuditRetries, m.AuditDropped, m.AuditLateFound, m.WindowSeeded, m.Intents, m.Recovering,
			m.RecoveryFailures)
	}
	return m
}

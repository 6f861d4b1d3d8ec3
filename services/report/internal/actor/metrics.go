package actor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/opswire/opswire/services/report/internal/images"
)

// metrics of the report actor (all prefixed opswire_report_).
type metrics struct {
	reports       *prometheus.CounterVec // trigger=schedule|request, outcome=sent|duplicate|failed
	rows          prometheus.Histogram
	offenders     prometheus.Gauge
	lastTick      prometheus.Gauge
	missed        prometheus.Counter
	paused        prometheus.Counter
	budgetUsed    prometheus.Gauge
	requests      *prometheus.CounterVec // outcome
	alerts        *prometheus.CounterVec // reason
	alertFailures prometheus.Counter
	storeErrors   *prometheus.CounterVec // op
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_report_reports_total",
			Help: "Restart reports by trigger (schedule, request) and outcome (sent, duplicate: another replica already stored it, overbudget: refused by sendReport.opsBudgetBytes, failed).",
		}, []string{"trigger", "outcome"}),
		rows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "opswire_report_rows",
			Help:    "Rows per restart report sent (after the top limit).",
			Buckets: []float64{0, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000},
		}),
		offenders: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_report_offenders",
			Help: "Rows over the threshold in the last report sent (before the top limit).",
		}),
		lastTick: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_report_last_tick_timestamp_seconds",
			Help: "Schedule tick of the last scheduled report sent.",
		}),
		missed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_report_ticks_missed_total",
			Help: "Scheduled ticks whose report could not be stored by their deadline (tick+catchUp or the next tick).",
		}),
		paused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_report_ticks_paused_total",
			Help: "Scheduled ticks not sent because a pause record (opswire pause) held the report actor.",
		}),
		budgetUsed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opswire_report_ops_budget_used_bytes",
			Help: "Bytes the restart reports take in OPS at the last check, against sendReport.opsBudgetBytes.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_report_requests_total",
			Help: "On-demand report requests by outcome (run, limited: over requestEvery/requestBurst, noreply: no reply subject).",
		}, []string{"outcome"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_report_image_alerts_total",
			Help: "Node image-storage alerts sent, by reason (maxBytes, maxPercent, growth).",
		}, []string{"reason"}),
		alertFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_report_image_alert_failures_total",
			Help: "Image alerts that could not be published (retried with backoff).",
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_report_store_errors_total",
			Help: "Failed reads or writes of the report KV bucket, by operation.",
		}, []string{"op"}),
	}
	// The closed label sets start at zero, so rate() and alerts see them
	// before the first report.
	for _, tr := range []string{"schedule", "request"} {
		for _, o := range []string{"sent", "failed"} {
			m.reports.WithLabelValues(tr, o)
		}
	}
	for _, r := range []string{images.ReasonMaxBytes, images.ReasonMaxPercent, images.ReasonGrowth} {
		m.alerts.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.reports, m.rows, m.offenders, m.lastTick, m.missed, m.paused, m.budgetUsed, m.requests, m.alerts, m.alertFailures, m.storeErrors)
	}
	return m
}

package dispatch

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the notifier's Prometheus series.
type Metrics struct {
	Messages    *prometheus.CounterVec // consumer, result: routed, unrouted, intent, malformed, duplicate, redelivered, max_deliver, foreign_source, records_unavailable
	Attempts    *prometheus.CounterVec // receiver, result (ok, retryable, permanent), reason
	Deliveries  *prometheus.CounterVec // receiver, outcome (delivered, failed)
	Events      *prometheus.CounterVec // receiver, outcome: OPS events carried by deliveries
	DeadLetters *prometheus.CounterVec // receiver, reason
	// DeadLetterErrors counts failed dead-letter writes (messages left unacked).
	DeadLetterErrors *prometheus.CounterVec   // receiver
	SendDuration     *prometheus.HistogramVec // receiver
	// RateLimitWait is the time deliveries spent waiting for the receiver's rate limit.
	RateLimitWait *prometheus.CounterVec // receiver
	// ConsumerStalls counts the times a receiver's consumer heard nothing
	// from the server for two heartbeats and pulled again (docs/notifier.md#consumer-stalls).
	ConsumerStalls *prometheus.CounterVec // receiver
	Pending        prometheus.Gauge
	Groups         prometheus.Gauge
}

// NewMetrics registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_messages_total",
			Help: "OPS messages received per consumer (one per receiver), by result (routed, unrouted, intent (write-ahead intents, acked unsent), malformed, duplicate, redelivered (a message it still held, redelivered after a NATS outage longer than ackWait: taken as the held one's delivery, not sent again), max_deliver, foreign_source (fleet: a subject outside the filter of the source it came through, terminated), records_unavailable (a redelivery whose delivered records could not be read: nak'ed with a delay of ackWait, not sent))."}, []string{"consumer", "result"}),
		Attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_send_attempts_total",
			Help: "Send attempts per receiver, by result (ok, retryable, permanent) and reason."}, []string{"receiver", "result", "reason"}),
		Deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_deliveries_total",
			Help: "Notifications (cards) per receiver, by final outcome (delivered, failed)."}, []string{"receiver", "outcome"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_events_total",
			Help: "OPS events carried by notifications per receiver, by final outcome."}, []string{"receiver", "outcome"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_dead_letters_total",
			Help: "OPS events dead-lettered per receiver, by reason."}, []string{"receiver", "reason"}),
		DeadLetterErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_dead_letter_errors_total",
			Help: "Dead-letter writes that failed; their OPS messages were left unacknowledged for redelivery."}, []string{"receiver"}),
		SendDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "opswire_notifier_send_duration_seconds",
			Help: "Duration of one send attempt.", Buckets: prometheus.DefBuckets}, []string{"receiver"}),
		RateLimitWait: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_rate_limit_wait_seconds_total",
			Help: "Seconds deliveries waited for the receiver's rate limit (per-type windows shared by receivers with one URL)."}, []string{"receiver"}),
		ConsumerStalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_consumer_stalls_total",
			Help: "Times a receiver's consumer received nothing (no message, no heartbeat) for two heartbeats and pulled again: a pull request lost (the client's refill race) or the server unreachable."}, []string{"receiver"}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "opswire_notifier_pending_messages",
			Help: "OPS messages held (grouping or retrying), not yet acknowledged."}),
		Groups: prometheus.NewGauge(prometheus.GaugeOpts{Name: "opswire_notifier_groups",
			Help: "Active groups (route and kind) waiting to be flushed."}),
	}
	reg.MustRegister(m.Messages, m.Attempts, m.Deliveries, m.Events, m.DeadLetters, m.DeadLetterErrors, m.SendDuration, m.RateLimitWait, m.ConsumerStalls, m.Pending, m.Groups)
	return m
}

// InitReceiver creates the series of a configured receiver at zero, so a
// dashboard and alert rules see them (and rate() works) before the first
// delivery or failure.
func (m *Metrics) InitReceiver(name string) {
	for _, o := range []string{OutcomeDelivered, OutcomeFailed} {
		m.Deliveries.WithLabelValues(name, o)
		m.Events.WithLabelValues(name, o)
	}
	m.Attempts.WithLabelValues(name, "ok", "")
	m.Messages.WithLabelValues(name, "foreign_source") // exported at 0: alert on any increase (docs/fleet.md#trust)
	m.DeadLetters.WithLabelValues(name, "max_deliver")
	m.DeadLetterErrors.WithLabelValues(name)
	m.RateLimitWait.WithLabelValues(name)
	m.ConsumerStalls.WithLabelValues(name)
	m.SendDuration.WithLabelValues(name)
}

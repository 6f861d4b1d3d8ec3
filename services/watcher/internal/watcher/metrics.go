package watcher

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	received  *prometheus.CounterVec
	published *prometheus.CounterVec
	unchanged *prometheus.CounterVec
	errors    *prometheus.CounterVec
	oversized *prometheus.CounterVec
	deferred  prometheus.Counter
	departed  *prometheus.CounterVec
	latency   prometheus.Histogram
	depth     prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, depth func() float64) *metrics {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_watcher_events_received_total", Help: "Informer events received, by kind and type.",
		}, []string{"kind", "event"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_watcher_published_total", Help: "States stored in KUBE, by kind and op.",
		}, []string{"kind", "op"}),
		unchanged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_watcher_skipped_unchanged_total", Help: "Updates not published because the compact state did not change.",
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_watcher_publish_errors_total", Help: "Failed publishes (each is retried).",
		}, []string{"kind"}),
		oversized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_watcher_oversized_total", Help: "States not published because they exceed the NATS max payload (not retried until the object changes).",
		}, []string{"kind"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "opswire_watcher_node_recounts_deferred_total",
			Help: "Node recounts deferred because pods left the node's index whose syncs had not counted their departures yet.",
		}),
		departed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opswire_watcher_departures_total",
			Help: "Pods that stopped counting on their node, by how they left: plain, evicted, unknown (final state never seen), exempt (DaemonSet or mirror pods, not in the node's totals).",
		}, []string{"how"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "opswire_watcher_publish_latency_seconds", Help: "Time from publish to JetStream acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		depth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "opswire_watcher_queue_depth", Help: "Objects waiting to be compared and published.",
		}, depth),
	}
	// Both kinds start at zero, so rate() and alerts see the series before
	// the first event or error.
	for _, k := range []string{"pod", "node"} {
		m.unchanged.WithLabelValues(k)
		m.errors.WithLabelValues(k)
		m.oversized.WithLabelValues(k)
	}
	for _, how := range []string{"plain", "evicted", "unknown", "exempt"} {
		m.departed.WithLabelValues(how)
	}
	if reg != nil {
		reg.MustRegister(m.received, m.published, m.unchanged, m.errors, m.oversized, m.deferred, m.departed, m.latency, m.depth)
	}
	return m
}

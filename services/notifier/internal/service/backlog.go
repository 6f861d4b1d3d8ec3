package service

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// backlogMetrics make a slow or stuck receiver visible, and a message OPS
// dropped before a receiver got it impossible to miss. Registered once per
// process (the active replica changes; the series stay).
type backlogMetrics struct {
	backlog *prometheus.GaugeVec
	lost    *prometheus.CounterVec
	fill    prometheus.Gauge
}

func newBacklogMetrics(reg prometheus.Registerer) *backlogMetrics {
	m := &backlogMetrics{
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "opswire_notifier_consumer_backlog",
			Help: "OPS messages a receiver's consumer has not settled: not pulled yet plus held unacked (grouping, retrying)."}, []string{"receiver"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "opswire_notifier_ops_lost_undelivered_total",
			Help: "OPS messages removed from the stream (nats.opsMaxBytes or opsMaxAge reached) before the receiver's consumer got them: never delivered."}, []string{"receiver"}),
		fill: prometheus.NewGauge(prometheus.GaugeOpts{Name: "opswire_notifier_ops_fill_ratio",
			Help: "OPS stored bytes / its MaxBytes; at 1 the oldest messages are dropped, delivered or not."}),
	}
	reg.MustRegister(m.backlog, m.lost, m.fill)
	return m
}

// seqTracker follows the stream sequences one receiver's consumer delivers,
// to find the messages OPS removed (nats.opsMaxBytes, opsMaxAge) before the
// consumer got them: a jump in the sequences it delivers, or the stream's
// first sequence passing the last one it delivered while it is stuck. A jump
// over messages still in the stream is only the consumer's subject filter
// (another cluster's messages) and is not counted; messages both removed and
// of another cluster are (an upper bound on a stream shared by clusters).
type seqTracker struct {
	mu      sync.Mutex
	last    uint64      // highest stream sequence delivered
	counted uint64      // highest sequence accounted for as lost
	gaps    [][2]uint64 // jumps seen since the last resolve, inclusive ranges
}

// observe is called with the stream sequence of every delivery.
func (s *seqTracker) observe(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.last {
		return // a redelivery
	}
	if lo := max(s.last, s.counted) + 1; s.last > 0 && seq > lo {
		s.gaps = append(s.gaps, [2]uint64{lo, seq - 1})
	}
	s.last = seq
}

// resolve counts what was lost, given the stream's first sequence now:
// every jump or tail below it. It returns the count and the range it spans.
func (s *seqTracker) resolve(firstSeq uint64) (lost, from, to uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if firstSeq == 0 {
		s.gaps = nil
		return 0, 0, 0
	}
	edge := firstSeq - 1
	add := func(lo, hi uint64) {
		if lo > hi {
			return
		}
		lost += hi - lo + 1
		if from == 0 || lo < from {
			from = lo
		}
		to = max(to, hi)
	}
	for _, g := range s.gaps {
		if g[0] <= edge {
			add(g[0], min(g[1], edge))
		}
	}
	s.gaps = nil
	if s.last > 0 && edge > max(s.last, s.counted) {
		add(max(s.last, s.counted)+1, edge)
	}
	s.counted = max(s.counted, edge)
	return lost, from, to
}

// watchBacklog reads OPS's state and every receiver consumer's each interval
// until ctx ends: the backlog and fill gauges, and the lost counter with an
// error log naming the receiver and the sequences.
func watchBacklog(ctx context.Context, js jetstream.JetStream, stream, cluster string, trackers map[string]*seqTracker, interval time.Duration, m *backlogMetrics, log zerolog.Logger) {
	warned := map[string]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, interval)
		checkBacklog(cctx, js, stream, cluster, trackers, warned, m, log)
		cancel()
	}
}

func checkBacklog(ctx context.Context, js jetstream.JetStream, stream, cluster string, trackers map[string]*seqTracker,
	warned map[string]bool, m *backlogMetrics, log zerolog.Logger) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return
	}
	si, err := st.Info(ctx)
	if err != nil {
		return
	}
	fill := 0.0
	if si.Config.MaxBytes > 0 {
		fill = float64(si.State.Bytes) / float64(si.Config.MaxBytes)
		m.fill.Set(fill)
	}
	for r, tr := range trackers {
		if lost, from, to := tr.resolve(si.State.FirstSeq); lost > 0 {
			m.lost.WithLabelValues(r).Add(float64(lost))
			log.Error().Str("receiver", r).Uint64("lost", lost).Uint64("fromSeq", from).Uint64("toSeq", to).
				Uint64("streamBytes", si.State.Bytes).Int64("maxBytes", si.Config.MaxBytes).
				Msg("OPS dropped messages this receiver had not received: they will never be delivered; raise nats.opsMaxBytes (sizing: docs/reliability.md)")
		}
		c, err := js.Consumer(ctx, stream, ConsumerName(cluster, r))
		if err != nil {
			continue
		}
		ci, err := c.Info(ctx)
		if err != nil {
			continue
		}
		backlog := ci.NumPending + uint64(ci.NumAckPending)
		m.backlog.WithLabelValues(r).Set(float64(backlog))
		switch high := fill >= 0.9 && backlog > 0; {
		case high && !warned[r]:
			warned[r] = true
			log.Warn().Str("receiver", r).Uint64("backlog", backlog).Float64("fill", fill).
				Msg("OPS is over 90% of nats.opsMaxBytes while this receiver has undelivered messages; the oldest are dropped at 100%")
		case !high:
			warned[r] = false
		}
	}
}

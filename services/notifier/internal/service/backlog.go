package service

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
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

// initReceiver creates a receiver's series at 0, so that the first loss is
// an increase (increase() and rate() miss the first sample of a series).
func (m *backlogMetrics) initReceiver(r string) {
	m.lost.WithLabelValues(r)
	m.backlog.WithLabelValues(r)
}

// seqTracker finds the messages OPS removed (nats.opsMaxBytes, opsMaxAge)
// before one receiver's consumer got them, across terms and replicas. It
// keeps the stream sequences accounted for — settled (acked or terminated
// by the dispatcher: delivered, dead-lettered, nothing to deliver) or
// already counted lost — as ranges, saved in the delivered-id bucket each
// interval and at the end of a term, and loaded at the start of the next
// one (whichever replica). Sequences delivered in this term and still held
// in memory are not lost while held. Every other sequence below the
// stream's first one was removed before the receiver got it: counted once.
// So messages OPS drops while no notifier is active (stopped, restarting,
// failing over), and held messages the stream dropped before a shutdown
// released them (a nak cannot bring them back), are counted too.
//
// What a term settled is saved only at those points, so a term killed
// (SIGKILL) between two saves loses what it settled since the last one.
// The consumer's ack floor recovers it (acked): whatever lies at or below
// the floor and was still stored when the floor was read was settled. Not
// what lies below the stream's first sequence: the server moves the ack
// floor past messages the stream dropped before anyone got them (an ack
// with nothing pending sets it to the last delivered, and the consumer's
// periodic check to the stream's first), which are the losses to count.
//
// A sequence never delivered because the consumer's subject filter excludes
// it (another cluster's, on a fleet stream shared by clusters) is accounted
// for once the ack floor passed it while it was stored; removed before, it
// is counted: an upper bound there.
type seqTracker struct {
	mu    sync.Mutex
	done  seqSet              // accounted for: settled or counted lost
	held  map[uint64]struct{} // delivered in this term, not settled
	dirty bool                // done changed since the last save
}

func newSeqTracker(done seqSet) *seqTracker {
	return &seqTracker{done: done, held: map[uint64]struct{}{}, dirty: true}
}

// observe is called with the stream sequence of every delivery.
func (s *seqTracker) observe(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done.has(seq) {
		s.held[seq] = struct{}{}
	}
}

// settle is called when the dispatcher acks or terminates a message.
func (s *seqTracker) settle(seq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, seq)
	if !s.done.has(seq) {
		s.done.add(seq, seq)
		s.dirty = true
	}
}

// acked accounts for the sequences from first to floor: floor is the
// consumer's ack floor and first the stream's first sequence, read after
// it, so each of them was still stored when the consumer was past it:
// settled, not dropped. first 0 (unknown) accounts for nothing.
func (s *seqTracker) acked(floor, first uint64) {
	if first == 0 || floor < first {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.done.holes(floor) {
		if h[1] >= first {
			s.done.add(max(h[0], first), floor)
			s.dirty = true
			return
		}
	}
}

// release forgets the held messages: the dispatcher nak'ed them at the end
// of the term; those OPS still stores come back to the next term.
func (s *seqTracker) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = map[uint64]struct{}{}
}

// resolve counts what was lost, given the stream's first sequence now: every
// sequence below it neither accounted for nor held. It returns the count and
// the range it spans.
func (s *seqTracker) resolve(firstSeq uint64) (lost, from, to uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if firstSeq <= 1 {
		return 0, 0, 0
	}
	edge := firstSeq - 1
	held := make([]uint64, 0, len(s.held))
	for q := range s.held {
		if q <= edge {
			held = append(held, q)
		}
	}
	slices.Sort(held)
	var gaps [][2]uint64
	for _, h := range s.done.holes(edge) {
		lo := h[0]
		for _, q := range held {
			if q < lo || q > h[1] {
				continue
			}
			if q > lo {
				gaps = append(gaps, [2]uint64{lo, q - 1})
			}
			lo = q + 1
		}
		if lo <= h[1] {
			gaps = append(gaps, [2]uint64{lo, h[1]})
		}
	}
	for _, g := range gaps {
		lost += g[1] - g[0] + 1
		if from == 0 {
			from = g[0]
		}
		to = g[1]
		s.done.add(g[0], g[1])
	}
	if lost > 0 {
		s.dirty = true
	}
	return lost, from, to
}

// seqSet is a set of stream sequences: sorted, disjoint, non-adjacent
// inclusive ranges. It stays short: one range up to the oldest unsettled
// message, and one per hole above it (held messages, another cluster's).
type seqSet [][2]uint64

func (s seqSet) has(seq uint64) bool {
	i := sort.Search(len(s), func(i int) bool { return s[i][1] >= seq })
	return i < len(s) && s[i][0] <= seq
}

func (s *seqSet) add(lo, hi uint64) {
	r := *s
	i := sort.Search(len(r), func(i int) bool { return r[i][1]+1 >= lo }) // first range touching or after lo
	j := i
	for j < len(r) && r[j][0] <= hi+1 {
		lo, hi = min(lo, r[j][0]), max(hi, r[j][1])
		j++
	}
	r = slices.Replace(r, i, j, [2]uint64{lo, hi})
	*s = r
}

// holes are the ranges in [1, edge] not in s.
func (s seqSet) holes(edge uint64) [][2]uint64 {
	var out [][2]uint64
	next := uint64(1)
	for _, r := range s {
		if r[0] > edge {
			break
		}
		if r[0] > next {
			out = append(out, [2]uint64{next, r[0] - 1})
		}
		next = r[1] + 1
	}
	if next <= edge {
		out = append(out, [2]uint64{next, edge})
	}
	return out
}

// maxSavedRanges bounds a saved record (a fleet consumer reading some of a
// shared stream's clusters has a hole per other cluster's run of messages):
// beyond it the lowest ranges are merged, as if accounted for.
const maxSavedRanges = 4096

// seqRecord is a receiver's accounted sequences as saved between terms,
// valid only for the consumer it was made for (one created at the same time:
// a re-created stream or consumer starts its sequences anew).
type seqRecord struct {
	Consumer string    `json:"consumer"`
	Created  time.Time `json:"created"`
	Done     seqSet    `json:"done"`
}

// seqKey is the record's key: per consumer (cluster and receiver), since
// the notifiers of several clusters may share the bucket.
func seqKey(consumer string) string { return "=seq." + config.ClusterKey(consumer) }

// loadTracker starts a term's tracker from the saved record of the
// receiver's consumer, plus what its ack floor says was settled since
// (acked: firstSeq is the stream's first sequence, read after ci, or 0);
// without one (first term, or the record aged out of the bucket) from the
// consumer's ack floor, which for a new consumer is just below its start.
func loadTracker(ctx context.Context, kv jetstream.KeyValue, receiver string, ci *jetstream.ConsumerInfo, firstSeq uint64, log zerolog.Logger) *seqTracker {
	if e, err := kv.Get(ctx, seqKey(ci.Name)); err == nil {
		var rec seqRecord
		if err := json.Unmarshal(e.Value(), &rec); err == nil && rec.Consumer == ci.Name && rec.Created.Equal(ci.Created) {
			tr := newSeqTracker(rec.Done)
			tr.acked(ci.AckFloor.Stream, firstSeq)
			return tr
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		log.Warn().Err(err).Str("receiver", receiver).Msg("cannot read the accounted OPS sequences; starting from the consumer's ack floor")
	}
	var done seqSet
	if f := ci.AckFloor.Stream; f > 0 {
		done.add(1, f)
	}
	return newSeqTracker(done)
}

// save stores the tracker's accounted sequences if they changed.
func (s *seqTracker) save(ctx context.Context, kv jetstream.KeyValue, ci *jetstream.ConsumerInfo) error {
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	done := slices.Clone(s.done)
	s.dirty = false
	s.mu.Unlock()
	if n := len(done) - maxSavedRanges; n > 0 {
		done = slices.Replace(done, 0, n+1, [2]uint64{done[0][0], done[n][1]})
	}
	b, _ := json.Marshal(seqRecord{Consumer: ci.Name, Created: ci.Created, Done: done})
	if _, err := kv.Put(ctx, seqKey(ci.Name), b); err != nil {
		s.mu.Lock()
		s.dirty = true
		s.mu.Unlock()
		return err
	}
	return nil
}

// trackedMsg tells the tracker when the dispatcher settles a message.
type trackedMsg struct {
	jetstream.Msg
	tr  *seqTracker
	seq uint64
}

func (m trackedMsg) Ack() error {
	err := m.Msg.Ack()
	if err == nil {
		m.tr.settle(m.seq)
	}
	return err
}

func (m trackedMsg) Term() error {
	err := m.Msg.Term()
	if err == nil {
		m.tr.settle(m.seq)
	}
	return err
}

// tracked is one receiver's tracker and the consumer it tracks.
type tracked struct {
	tr   *seqTracker
	info *jetstream.ConsumerInfo // at the start of the term: its name and creation time
}

// watchBacklog reads OPS's state and every receiver consumer's each interval
// until ctx ends: the backlog and fill gauges, and the lost counter with an
// error log naming the receiver and the sequences; it saves the trackers.
func watchBacklog(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, stream, cluster string, trackers map[string]tracked, interval time.Duration, m *backlogMetrics, log zerolog.Logger) {
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
		checkBacklog(cctx, js, kv, stream, cluster, trackers, warned, m, log)
		cancel()
	}
}

// endTerm runs once the dispatchers stopped and nak'ed what they held:
// held messages OPS no longer stores are lost now (counted and logged), and
// the trackers are saved for the next term.
func endTerm(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, stream string, trackers map[string]tracked, m *backlogMetrics, log zerolog.Logger) {
	for _, t := range trackers {
		t.tr.release()
	}
	si, err := streamInfo(ctx, js, stream)
	if err != nil {
		log.Warn().Err(err).Msg("cannot read OPS at the end of the term; the next term counts what was lost")
		return
	}
	for r, t := range trackers {
		countLost(r, t.tr, si, m, log)
		if err := t.tr.save(ctx, kv, t.info); err != nil {
			log.Warn().Err(err).Str("receiver", r).Msg("cannot save the accounted OPS sequences")
		}
	}
}

func streamInfo(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return st.Info(ctx)
}

func countLost(r string, tr *seqTracker, si *jetstream.StreamInfo, m *backlogMetrics, log zerolog.Logger) {
	if lost, from, to := tr.resolve(si.State.FirstSeq); lost > 0 {
		m.lost.WithLabelValues(r).Add(float64(lost))
		log.Error().Str("receiver", r).Uint64("lost", lost).Uint64("fromSeq", from).Uint64("toSeq", to).
			Uint64("streamBytes", si.State.Bytes).Int64("maxBytes", si.Config.MaxBytes).
			Msg("OPS dropped messages this receiver had not received: they will never be delivered; raise nats.opsMaxBytes (sizing: docs/reliability.md)")
	}
}

func checkBacklog(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, stream, cluster string, trackers map[string]tracked,
	warned map[string]bool, m *backlogMetrics, log zerolog.Logger) {
	// The consumers first, then the stream: an ack floor is only trusted up
	// from a first sequence read after it (seqTracker.acked).
	infos := make(map[string]*jetstream.ConsumerInfo, len(trackers))
	for r := range trackers {
		if c, err := js.Consumer(ctx, stream, ConsumerName(cluster, r)); err == nil {
			if ci, err := c.Info(ctx); err == nil {
				infos[r] = ci
			}
		}
	}
	si, err := streamInfo(ctx, js, stream)
	if err != nil {
		return
	}
	fill := 0.0
	if si.Config.MaxBytes > 0 {
		fill = float64(si.State.Bytes) / float64(si.Config.MaxBytes)
		m.fill.Set(fill)
	}
	for r, t := range trackers {
		ci := infos[r]
		if ci != nil {
			t.tr.acked(ci.AckFloor.Stream, si.State.FirstSeq)
		}
		countLost(r, t.tr, si, m, log)
		if err := t.tr.save(ctx, kv, t.info); err != nil {
			log.Debug().Err(err).Str("receiver", r).Msg("cannot save the accounted OPS sequences")
		}
		if ci == nil {
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

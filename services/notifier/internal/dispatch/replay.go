package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/render"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/subject"
)

// DeadLetter is one stored dead letter.
type DeadLetter struct {
	Seq     uint64
	Subject string
	Header  nats.Header
	Data    []byte
}

// DeadLetters reads and removes a receiver's dead letters.
type DeadLetters interface {
	// Read returns the dead letters stored on subj, oldest first.
	Read(ctx context.Context, subj string) ([]DeadLetter, error)
	// Delete removes one dead letter after it was delivered.
	Delete(ctx context.Context, seq uint64) error
}

// StreamDeadLetters reads the DLQ stream.
type StreamDeadLetters struct {
	JS jetstream.JetStream
}

// Read fetches every message of subj present when it starts.
func (s StreamDeadLetters) Read(ctx context.Context, subj string) ([]DeadLetter, error) {
	st, err := s.JS.Stream(ctx, DeadLetterStream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", DeadLetterStream, err)
	}
	want := info.State.Subjects[subj]
	if want == 0 {
		return nil, nil
	}
	oc, err := s.JS.OrderedConsumer(ctx, DeadLetterStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", DeadLetterStream, err)
	}
	var out []DeadLetter
	for uint64(len(out)) < want {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", DeadLetterStream, err)
		}
		n, last := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			out = append(out, DeadLetter{Seq: md.Sequence.Stream, Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
			last = md.NumPending == 0
		}
		if batch.Error() != nil && !errors.Is(batch.Error(), nats.ErrTimeout) {
			return nil, fmt.Errorf("read %s: %w", DeadLetterStream, batch.Error())
		}
		if n == 0 || last {
			break // fewer than counted: some were deleted or expired meanwhile
		}
	}
	return out, nil
}

// Delete removes one message from the DLQ stream.
func (s StreamDeadLetters) Delete(ctx context.Context, seq uint64) error {
	st, err := s.JS.Stream(ctx, DeadLetterStream)
	if err != nil {
		return err
	}
	return st.DeleteMsg(ctx, seq)
}

// ReplayResult is the answer to one receiver's replay.
type ReplayResult struct {
	Receiver string `json:"receiver"`
	// Cluster whose dead letters were replayed (fleet notifier only).
	Cluster string `json:"cluster,omitempty"`
	// DeadLetters were read; Events are the distinct events among them.
	DeadLetters int `json:"deadLetters"`
	Events      int `json:"events"`
	// Delivered events were sent now in Cards cards; AlreadyDelivered had
	// been delivered before (their dead letters are only removed). Failed
	// events stay in the DLQ for the next replay.
	Delivered        int    `json:"delivered"`
	Cards            int    `json:"cards"`
	AlreadyDelivered int    `json:"alreadyDelivered"`
	Failed           int    `json:"failed"`
	Error            string `json:"error,omitempty"`
}

// replayAttempts bounds the attempts of one replayed card; what still fails
// stays in the DLQ.
const replayAttempts = 3

// Replay re-sends the dead letters of one of this dispatcher's receivers
// (after the cause was fixed), grouped per route and kind into cards as
// usual. An event is sent at most once: a dead letter whose event the
// delivered-id records call delivered is only removed, and a delivered
// card's events are recorded before their dead letters are removed. Those
// that fail again stay in the DLQ, untouched.
func (x *Dispatcher) Replay(ctx context.Context, dl DeadLetters, receiver string) ReplayResult {
	return x.ReplayCluster(ctx, dl, receiver, x.clusterTk)
}

// ReplayCluster is Replay of the dead letters of one cluster (its subject
// token): a fleet notifier keeps them per cluster, dlq.<cluster>.notifier.<receiver>.
func (x *Dispatcher) ReplayCluster(ctx context.Context, dl DeadLetters, receiver, cluster string) ReplayResult {
	res := ReplayResult{Receiver: receiver}
	if x.s.Fleet {
		res.Cluster = cluster
	}
	w := x.workers[receiver]
	if w == nil {
		res.Error = "unknown receiver"
		return res
	}
	log := x.d.Log.With().Str("receiver", receiver).Logger()
	letters, err := dl.Read(ctx, DeadLetterSubject(cluster, receiver))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.DeadLetters = len(letters)
	type event struct {
		route string
		item  *notify.Item
		seqs  []uint64
	}
	byKey := map[string]*event{}
	var order []string
	for _, l := range letters {
		orig := l.Header.Get(HeaderOrigSubject)
		it, err := notify.Decode(orig, l.Header, l.Data)
		if err != nil {
			log.Warn().Err(err).Uint64("seq", l.Seq).Msg("dead letter cannot be decoded; left in the DLQ")
			res.Failed++
			continue
		}
		routeName := l.Header.Get(HeaderDLQRoute)
		key := DeliveredKey(x.clusterOf(it), routeName, receiver, it.ID)
		e, ok := byKey[key]
		if !ok {
			e = &event{route: routeName, item: it}
			byKey[key] = e
			order = append(order, key)
		}
		e.seqs = append(e.seqs, l.Seq)
	}
	res.Events = len(byKey)
	remove := func(e *event) {
		for _, seq := range e.seqs {
			if err := dl.Delete(ctx, seq); err != nil {
				log.Warn().Err(err).Uint64("seq", seq).Msg("cannot remove a replayed dead letter; a later replay skips it as delivered")
			}
		}
	}
	// Group what was not delivered yet per route and kind.
	groups := map[string][]*event{}
	var groupOrder []string
	for _, key := range order {
		e := byKey[key]
		rec, err := x.d.Delivered.State(ctx, key)
		if err != nil {
			res.Error = "cannot read delivered records: " + err.Error()
			res.Failed += len(e.seqs)
			continue
		}
		if rec == RecordDelivered {
			res.AlreadyDelivered++
			remove(e)
			continue
		}
		g := x.groupKey(e.route, e.item)
		if _, ok := groups[g]; !ok {
			groupOrder = append(groupOrder, g)
		}
		groups[g] = append(groups[g], e)
	}
	sort.Strings(groupOrder)
	now := x.now()
	for _, g := range groupOrder {
		evs := groups[g]
		r := x.d.Routes.ByName(evs[0].route)
		if r == nil {
			r = &config.Route{Name: evs[0].route}
		}
		items := make([]*notify.Item, len(evs))
		byItem := map[*notify.Item]*event{}
		for i, e := range evs {
			items[i] = e.item
			byItem[e.item] = e
		}
		gc := x.clusterOf(evs[0].item)
		for _, n := range render.Render(render.Group{Route: r.Name, Key: g, Title: r.Title, Cluster: gc, ClusterInTitle: x.s.Fleet, Now: now}, items) {
			n.Receiver = receiver
			if err := w.sendOnce(ctx, n); err != nil {
				res.Failed += len(n.Items)
				res.Error = err.Error()
				log.Error().Err(err).Str("route", r.Name).Int("events", len(n.Items)).Msg("replayed dead letters failed again; left in the DLQ")
				continue
			}
			keys := make([]string, len(n.Items))
			ids := make([]string, len(n.Items))
			for i, it := range n.Items {
				keys[i], ids[i] = DeliveredKey(gc, r.Name, receiver, it.ID), it.ID
			}
			// Recorded before the dead letters go: a crash in between leaves
			// dead letters that the next replay only removes.
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := x.d.Delivered.Mark(mctx, keys, RecordDelivered); err != nil {
				log.Warn().Err(err).Msg("cannot record replayed events as delivered")
			}
			cancel()
			for _, it := range n.Items {
				remove(byItem[it])
			}
			res.Delivered += len(n.Items)
			res.Cards++
			x.d.Metrics.Deliveries.WithLabelValues(receiver, OutcomeDelivered).Inc()
			x.d.Metrics.Events.WithLabelValues(receiver, OutcomeDelivered).Add(float64(len(ids)))
			_ = publishOutcome(x.d.Core, subject.Notify(gc, receiver, OutcomeDelivered), Outcome{Receiver: receiver, Route: r.Name, Cluster: gc,
				Outcome: OutcomeDelivered, Reason: "replayed", Title: n.Title, Events: len(ids), IDs: ids, Time: x.now()})
		}
	}
	log.Info().Int("deadLetters", res.DeadLetters).Int("delivered", res.Delivered).Int("alreadyDelivered", res.AlreadyDelivered).
		Int("failed", res.Failed).Msg("dead letters replayed")
	return res
}

// sendOnce delivers one replayed card with a few attempts under the
// receiver's rate limit (shared with the live path).
func (w *worker) sendOnce(ctx context.Context, n *notify.Notification) error {
	backoff := w.x.s.RetryInitial
	var err error
	for attempt := 1; attempt <= replayAttempts; attempt++ {
		if werr := w.r.Limiter.Wait(ctx); werr != nil {
			return werr
		}
		w.x.saveRate(ctx, w.r)
		actx, cancel := context.WithTimeout(ctx, w.r.Timeout)
		var retryable bool
		retryable, err = w.r.Sink.Send(actx, n)
		cancel()
		if err == nil {
			w.x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "ok", "").Inc()
			return nil
		}
		reason := notify.ReasonOf(err)
		if !retryable {
			w.x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "permanent", string(reason)).Inc()
			return err
		}
		w.x.d.Metrics.Attempts.WithLabelValues(w.r.Name, "retryable", string(reason)).Inc()
		if attempt < replayAttempts {
			if serr := sleepCtx(ctx, backoff); serr != nil {
				return err
			}
			backoff = min(2*backoff, w.x.s.RetryMax)
		}
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

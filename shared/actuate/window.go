package actuate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/subject"
)

// Window caps actions at Max in any sliding window of length Per.
//
// A token bucket (x/time/rate) does not fit the contract "at most N per
// window": with burst N it lets N through at once and refills during the same
// window, so up to 2N pass in the first one. The window keeps the times of the
// last Max actions instead: exact, O(Max) memory.
//
// The cap is about the writes the API receives, and a write reaches the API
// well after its slot was reserved (the re-reads, the intent, the writes
// themselves, each up to its timeout). So an actuator holds its slot (Hold)
// for the whole action: a held slot counts at every instant until the action
// is over, and then from its last write's answer (Slot.Settle), never from
// the reservation. A slot counted from the reservation freed while the write
// was still under way and let the next action's write reach the API less
// than Per after it.
//
// A new leader seeds it from the OPS stream (Seed), which records what the
// previous leaders did: a failover or a crash loop cannot multiply the limit.
type Window struct {
	Max int
	Per time.Duration

	mu      sync.Mutex
	times   []time.Time // sorted, oldest first: the actions done
	pending int         // held slots whose action is not over (Slot)
}

// NewWindow builds a window of max actions per per. Its memory grows with
// the actions it holds, not with max: a generous limit costs nothing until
// it is used.
func NewWindow(max int, per time.Duration) *Window {
	return &Window{Max: max, Per: per, times: make([]time.Time, 0, min(max, 64))}
}

// Reserve takes a slot for an action done at now. It returns 0 when a slot
// was taken, or how long to wait until one frees up (nothing is taken then).
func (w *Window) Reserve(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wait := w.wait(now); wait > 0 {
		return wait
	}
	w.insert(now)
	return 0
}

// Hold takes a slot for an action that starts now and whose writes come
// later, or returns how long to wait until one may free up (nil slot then).
// The slot counts against Max until Slot.Settle or Slot.Release, however
// long that takes.
func (w *Window) Hold(now time.Time) (*Slot, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wait := w.wait(now); wait > 0 {
		return nil, wait
	}
	w.pending++
	return &Slot{w: w}, 0
}

// wait is how long until a slot is free at now (0: one is). A held slot
// counts as an action at now: it frees Per after it settles at the earliest.
// Called with w.mu held.
func (w *Window) wait(now time.Time) time.Duration {
	w.expire(now)
	n := len(w.times) + w.pending
	if n < w.Max {
		return 0
	}
	// The action that must leave is the (n-Max)th of the done ones and the
	// held ones (at now), in time order.
	i := n - w.Max
	k := sort.Search(len(w.times), func(j int) bool { return w.times[j].After(now) }) // done at or before now
	at := now
	switch {
	case i < k:
		at = w.times[i]
	case i >= k+w.pending:
		at = w.times[i-w.pending]
	}
	return at.Add(w.Per).Sub(now)
}

// Release gives back a slot taken at t when no action happened (the object
// was gone, no longer qualified, or the write failed).
func (w *Window) Release(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeAt(t)
}

// removeAt takes one action at t out (none: nothing changes); w.mu held.
func (w *Window) removeAt(t time.Time) {
	for i := len(w.times) - 1; i >= 0; i-- {
		if w.times[i].Equal(t) {
			w.times = slices.Delete(w.times, i, i+1)
			return
		}
	}
}

// Slot is one action held in a Window (Window.Hold). Its owner reports each
// write's answer (Wrote), then ends it: Settle when it may have written,
// Release when it certainly did not. A write in doubt is settled, never
// released: it may commit after any read that shows it did not happen yet
// (cordon holds it until a read decides it, and settles it then). A nil Slot (no window: dry run, no
// limiter) does nothing.
type Slot struct {
	w        *Window
	wrote    time.Time // the last write's answer; zero: none yet
	settled  time.Time // the time it counts from once settled; zero: held
	released bool
}

// Wrote records that a write of the action answered at at (succeeded, or
// failed in a way that leaves it in doubt): the action counts from its last
// answer once settled. The slot stays held until then: an action of two
// writes (a PATCH, then a DELETE) is not counted from the first.
func (s *Slot) Wrote(at time.Time) {
	if s == nil {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if at.After(s.wrote) {
		s.wrote = at
	}
}

// Settle ends the action: it counts for Per from its last write's answer,
// or from now when none was reported (an action that may have written
// counts, at the latest time it can have). A call after Settle or Release
// does nothing.
func (s *Slot) Settle(now time.Time) {
	if s == nil {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.released || !s.settled.IsZero() {
		return
	}
	s.w.pending--
	s.settled = s.wrote
	if s.settled.IsZero() {
		s.settled = now
	}
	s.w.insert(s.settled)
}

// Release gives the slot back: the action wrote nothing (the object was
// gone, no longer qualified, or the API refused the write). After Settle it
// takes the settled action back out (no actor does: a write that was in
// doubt counts). A second Release does nothing.
func (s *Slot) Release() {
	if s == nil {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	if s.settled.IsZero() {
		s.w.pending--
		return
	}
	s.w.removeAt(s.settled)
}

// Seed adds actions done at the given times (by an earlier leader).
func (w *Window) Seed(times []time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range times {
		w.insert(t)
	}
}

// Len is the number of actions in the window ending at now, held ones included.
func (w *Window) Len(now time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expire(now)
	return len(w.times) + w.pending
}

func (w *Window) expire(now time.Time) {
	cut := 0
	for cut < len(w.times) && !w.times[cut].After(now.Add(-w.Per)) {
		cut++
	}
	w.times = slices.Delete(w.times, 0, cut)
}

func (w *Window) insert(t time.Time) {
	i, _ := slices.BinarySearchFunc(w.times, t, func(a, b time.Time) int { return a.Compare(b) })
	w.times = slices.Insert(w.times, i, t)
}

// RecentActions reads from the OPS stream the store times of the messages on
// the given subject filters since the given time: the actions an actor's
// earlier leaders did in the current window. Filters name only real actions
// (e.g. ops.<cluster>.cordon.cordoned.>), never skipped, dryrun or failed.
func RecentActions(ctx context.Context, js jetstream.JetStream, filters []string, since time.Time) ([]time.Time, error) {
	var times []time.Time
	// One filter at a time (a consumer with several FilterSubjects and a
	// start time started one message late on nats-server 2.15).
	for _, f := range filters {
		ts, err := recent(ctx, js, f, since)
		if err != nil {
			return nil, fmt.Errorf("read recent actions on %s from %s: %w", f, subject.OpsStream, err)
		}
		times = append(times, ts...)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times, nil
}

// stored is one OPS message as read back by a new leader.
type stored struct {
	Time    time.Time // the stream's store time
	Subject string
	Header  nats.Header
	Data    []byte
}

// recent reads the store times of one filter's messages since the given time.
func recent(ctx context.Context, js jetstream.JetStream, filter string, since time.Time) ([]time.Time, error) {
	msgs, err := readOPS(ctx, js, filter, since)
	if err != nil {
		return nil, err
	}
	times := make([]time.Time, len(msgs))
	for i, m := range msgs {
		times[i] = m.Time
	}
	return times, nil
}

// readOPS reads one filter with direct gets (AllowDirect is on for OPS): the
// first message stored at or after since, then each next one, until none is
// left. No consumer is created, so an actor needs no consumer permission on
// OPS and cannot pull from, change or delete the notifier's durable consumers
// (docs/security.md).
func readOPS(ctx context.Context, js jetstream.JetStream, filter string, since time.Time) ([]stored, error) {
	prefix := js.Options().APIPrefix
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	subj := prefix + "DIRECT.GET." + subject.OpsStream
	req := directGet{StartTime: &since, NextFor: filter}
	var out []stored
	for {
		body, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		msg, err := js.Conn().RequestWithContext(rctx, subj, body)
		cancel()
		if err != nil {
			return nil, err
		}
		if st := msg.Header.Get("Status"); st == "404" {
			return out, nil
		} else if st != "" {
			return nil, fmt.Errorf("direct get: status %s %s", st, msg.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("direct get: sequence %q: %w", msg.Header.Get(jetstream.SequenceHeader), err)
		}
		ts, err := time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer))
		if err != nil {
			return nil, fmt.Errorf("direct get: time stamp: %w", err)
		}
		out = append(out, stored{Time: ts, Subject: msg.Header.Get(jetstream.SubjectHeader), Header: msg.Header, Data: msg.Data})
		req = directGet{Seq: seq + 1, NextFor: filter}
	}
}

// directGet is the body of a JetStream direct-get request.
type directGet struct {
	Seq       uint64     `json:"seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
}

// SeedFromOPS seeds w with the actions stored on filters during the last
// w.Per, retrying until it succeeds or ctx ends. A leader calls it before its
// first action: acting unseeded could exceed the limit, so it waits instead.
func SeedFromOPS(ctx context.Context, js jetstream.JetStream, w *Window, filters []string, m *Metrics, log zerolog.Logger, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	backoff := 200 * time.Millisecond
	for {
		start := now()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		times, err := RecentActions(rctx, js, filters, start.Add(-w.Per))
		cancel()
		if err == nil {
			w.Seed(times)
			if m != nil {
				m.WindowSeeded.Set(float64(len(times)))
			}
			log.Info().Int("actions", len(times)).Int("max", w.Max).Dur("window", w.Per).Strs("subjects", filters).
				Msg("rate window seeded from OPS: earlier leaders' actions count")
			return nil
		}
		log.Warn().Err(err).Msg("cannot read the rate window from OPS; not acting until it is known")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

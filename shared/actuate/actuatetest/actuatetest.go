// Package actuatetest holds the test doubles the actors' actuator tests
// share: an OPS publisher, an intent journal and a clock moved by hand.
package actuatetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/pause"
)

// Publisher records what an actuator publishes: it is the OPS stream's
// PublishMsg and, synchronously, an actuate.Audit.
type Publisher struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

// PublishMsg stores m and acknowledges it with its position in OPS.
func (p *Publisher) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.msgs = append(p.msgs, m)
	return &jetstream.PubAck{Stream: "OPS", Sequence: uint64(len(p.msgs))}, nil
}

// Publish records a message the way the audit publisher would send it
// (actuate.Audit), synchronously.
func (p *Publisher) Publish(subj string, ev envelope.Event) {
	_, _ = p.PublishMsg(context.Background(), ev.Msg(subj))
}

// All is every message published so far, in order.
func (p *Publisher) All() []*nats.Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*nats.Msg(nil), p.msgs...)
}

// Intents is an actuate.Intents that records every intent; Stored is what
// Record answers.
type Intents struct {
	mu     sync.Mutex
	Stored bool
	Msgs   []*nats.Msg
}

var _ actuate.Intents = (*Intents)(nil)

// Record keeps the intent and answers Stored.
func (r *Intents) Record(_ context.Context, subj string, ev envelope.Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Msgs = append(r.Msgs, ev.Msg(subj))
	return r.Stored
}

// Count is how many intents were recorded.
func (r *Intents) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.Msgs)
}

// Intent decodes the i-th recorded intent.
func (r *Intents) Intent(t testing.TB, i int) (*nats.Msg, envelope.Event, events.Intent) {
	t.Helper()
	r.mu.Lock()
	m := r.Msgs[i]
	r.mu.Unlock()
	var in events.Intent
	ev, err := envelope.Decode(m.Header, m.Data, events.TypeIntent, &in)
	if err != nil {
		t.Fatal(err)
	}
	return m, ev, in
}

// Journal is Intents that also stores answer records (actuate.Answers), as
// actuate.Journal does; Answer too answers Stored.
type Journal struct {
	Intents
	Answers []*nats.Msg // the answer records, apart from the intents
}

var _ actuate.Answers = (*Journal)(nil)

// NewJournal is a Journal whose stores report stored.
func NewJournal(stored bool) *Journal { return &Journal{Intents: Intents{Stored: stored}} }

// Answer keeps the answer record of the intent (isubj, iev).
func (r *Journal) Answer(_ context.Context, isubj string, iev envelope.Event, why string) bool {
	subj, ev, err := actuate.NewAnswer(isubj, iev, why)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Answers = append(r.Answers, ev.Msg(subj))
	return r.Stored
}

// Clock is a clock a test moves by hand; it is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock is a Clock at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock on by d.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set puts the clock at now.
func (c *Clock) Set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// SlowIntents is an actuate.Intents whose first Record takes Delay on Clock
// and then reports the intent not stored (NATS slow or down: the intent's
// timeout); the later ones are stored at once.
type SlowIntents struct {
	Clock *Clock
	Delay time.Duration
	calls int
}

var _ actuate.Intents = (*SlowIntents)(nil)

// Record stores every intent but the first.
func (s *SlowIntents) Record(context.Context, string, envelope.Event) bool {
	s.calls++
	if s.calls == 1 {
		s.Clock.Add(s.Delay)
		return false
	}
	return true
}

// Pause is a fixed pause state (what an actuator asks of pause.Watcher):
// paused with Rec while On.
type Pause struct {
	Rec pause.Record
	On  bool
}

// Paused reports the state.
func (p *Pause) Paused() (pause.Record, bool) { return p.Rec, p.On }

package actuate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/testkit"
	"github.com/opswire/opswire/shared/testport"
)

// flakyPublisher fails while down is set and records every attempt.
type flakyPublisher struct {
	mu       sync.Mutex
	down     bool
	block    chan struct{} // when non-nil, attempts wait for it
	attempts []string      // Nats-Msg-Id of each attempt
	stored   []string
	err      error
}

func (p *flakyPublisher) PublishMsg(ctx context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	p.mu.Lock()
	block := p.block
	p.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.attempts = append(p.attempts, m.Header.Get(envelope.HeaderMsgID))
	if p.err != nil {
		return nil, p.err
	}
	if p.down {
		return nil, nats.ErrNoResponders
	}
	p.stored = append(p.stored, m.Header.Get(envelope.HeaderMsgID))
	return &jetstream.PubAck{}, nil
}

func (p *flakyPublisher) set(f func(p *flakyPublisher)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *flakyPublisher) snapshot() (attempts, stored []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.attempts...), append([]string(nil), p.stored...)
}

func event(t *testing.T, id string) envelope.Event {
	t.Helper()
	ev, err := envelope.New(id, "opswire/t/test", "t.v1", "", map[string]string{"id": id}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestAuditorKeepsRetryingInOrder: while the stream is unreachable Publish
// returns at once, the backlog grows and is exported; when it is back every
// message is stored once, in order, each retry with the message's own id.
func TestAuditorKeepsRetryingInOrder(t *testing.T) {
	p := &flakyPublisher{down: true}
	m := NewMetrics(nil)
	a := NewAuditor(p, 50*time.Millisecond, m, zerolog.Nop())
	defer a.Close(time.Second)
	start := time.Now()
	for i := range 100 {
		a.Publish("ops.t.test.x", event(t, fmt.Sprintf("id-%d", i)))
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100 Publish calls took %v during an outage; they must not wait for the stream", d)
	}
	testkit.Eventually(t, 5*time.Second, "several failed attempts", func() bool { attempts, _ := p.snapshot(); return len(attempts) >= 3 })
	if got := a.Backlog(); got != 100 {
		t.Fatalf("backlog %d, want 100", got)
	}
	if got := testutil.ToFloat64(m.AuditBacklog); got != 100 {
		t.Fatalf("backlog gauge %v", got)
	}
	attempts, stored := p.snapshot()
	for _, id := range attempts {
		if id != "id-0" {
			t.Fatalf("attempt with id %s while the first message is unstored (order, same id): %v", id, attempts)
		}
	}
	if len(stored) != 0 || testutil.ToFloat64(m.AuditRetries) < 3 {
		t.Fatalf("stored %v, retries %v", stored, testutil.ToFloat64(m.AuditRetries))
	}
	p.set(func(p *flakyPublisher) { p.down = false })
	testkit.Eventually(t, 10*time.Second, "the backlog stored", func() bool { return a.Backlog() == 0 })
	_, stored = p.snapshot()
	if len(stored) != 100 {
		t.Fatalf("%d stored, want 100", len(stored))
	}
	for i, id := range stored {
		if id != fmt.Sprintf("id-%d", i) {
			t.Fatalf("stored out of order at %d: %v", i, stored)
		}
	}
	if testutil.ToFloat64(m.AuditStored) != 100 || testutil.ToFloat64(m.AuditBacklog) != 0 || testutil.ToFloat64(m.AuditDropped) != 0 {
		t.Fatalf("metrics stored=%v backlog=%v dropped=%v", testutil.ToFloat64(m.AuditStored),
			testutil.ToFloat64(m.AuditBacklog), testutil.ToFloat64(m.AuditDropped))
	}
}

// TestAuditorPermanentError: a message no retry can store is dropped and
// counted; the next one goes on.
func TestAuditorPermanentError(t *testing.T) {
	p := &flakyPublisher{err: nats.ErrMaxPayload}
	m := NewMetrics(nil)
	a := NewAuditor(p, time.Second, m, zerolog.Nop())
	defer a.Close(time.Second)
	a.Publish("ops.t.test.x", event(t, "big"))
	testkit.Eventually(t, 5*time.Second, "the message dropped", func() bool { return testutil.ToFloat64(m.AuditDropped) == 1 })
	p.set(func(p *flakyPublisher) { p.err = nil })
	a.Publish("ops.t.test.x", event(t, "next"))
	testkit.Eventually(t, 5*time.Second, "the next stored", func() bool { _, s := p.snapshot(); return len(s) == 1 && s[0] == "next" })
}

// TestAuditorClose: Close flushes what it can within the grace period and
// counts the rest as dropped; a Publish after Close is counted too.
func TestAuditorClose(t *testing.T) {
	p := &flakyPublisher{}
	m := NewMetrics(nil)
	a := NewAuditor(p, time.Second, m, zerolog.Nop())
	a.Publish("ops.t.test.x", event(t, "one"))
	testkit.Eventually(t, 5*time.Second, "stored", func() bool { return a.Backlog() == 0 })
	p.set(func(p *flakyPublisher) { p.down = true })
	a.Publish("ops.t.test.x", event(t, "two"))
	a.Publish("ops.t.test.x", event(t, "three"))
	start := time.Now()
	a.Close(300 * time.Millisecond)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with a 300ms grace", d)
	}
	if got := testutil.ToFloat64(m.AuditDropped); got != 2 {
		t.Fatalf("dropped %v, want 2", got)
	}
	a.Publish("ops.t.test.x", event(t, "late"))
	if got := testutil.ToFloat64(m.AuditDropped); got != 3 {
		t.Fatalf("dropped %v after a late Publish, want 3", got)
	}
}

// TestAuditorNATSOutage: a real server goes away for longer than half the
// stream's duplicate window; the messages published meanwhile are stored once
// after it is back.
func TestAuditorNATSOutage(t *testing.T) {
	dir := t.TempDir()
	s := natstest.StartWithOptions(t, &server.Options{StoreDir: dir, Port: testport.Must(t)}) // restarted on it
	url := s.ClientURL()
	port, err := strconv.Atoi(url[strings.LastIndex(url, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Default().NATS
	cfg.Duplicates = config.D(time.Second)
	if err := natsx.EnsureStreams(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	a := NewAuditor(js, 200*time.Millisecond, m, zerolog.Nop())
	defer a.Close(time.Second)
	a.Publish("ops.t.cordon.cordoned.before", event(t, "before"))
	testkit.Eventually(t, 5*time.Second, "first stored", func() bool { return a.Backlog() == 0 })

	s.Shutdown()
	s.WaitForShutdown()
	a.Publish("ops.t.cordon.cordoned.during-1", event(t, "during-1"))
	a.Publish("ops.t.cordon.cordoned.during-2", event(t, "during-2"))
	testkit.Eventually(t, 5*time.Second, "failed attempts", func() bool { return testutil.ToFloat64(m.AuditRetries) >= 3 })
	// Longer than half the duplicate window (the old limit after which an
	// audit was abandoned): nothing is given up.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if a.Backlog() != 2 || testutil.ToFloat64(m.AuditDropped) != 0 {
			t.Fatalf("backlog %d, dropped %v during the outage; want 2, 0", a.Backlog(), testutil.ToFloat64(m.AuditDropped))
		}
	}
	natstest.StartWithOptions(t, &server.Options{Port: port, StoreDir: dir})
	testkit.Eventually(t, 20*time.Second, "the backlog stored after the outage", func() bool { return a.Backlog() == 0 })
	st, err := js.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("ops.>"))
	if err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{"ops.t.cordon.cordoned.before", "ops.t.cordon.cordoned.during-1", "ops.t.cordon.cordoned.during-2"} {
		if info.State.Subjects[subj] != 1 {
			t.Fatalf("%s stored %d times: %v", subj, info.State.Subjects[subj], info.State.Subjects)
		}
	}
	if testutil.ToFloat64(m.AuditStored) != 3 || testutil.ToFloat64(m.AuditDropped) != 0 {
		t.Fatalf("stored %v dropped %v", testutil.ToFloat64(m.AuditStored), testutil.ToFloat64(m.AuditDropped))
	}
}

// unreadable publishes through JetStream but cannot read OPS back (a
// JetStream API request failing while publishes go through).
type unreadable struct{ jetstream.JetStream }

func (unreadable) Stream(context.Context, string) (jetstream.Stream, error) {
	return nil, errors.New("JetStream API: timeout")
}

// TestAuditorUnreadableDuplicateDoesNotStallTheQueue: an audit acknowledged
// as a duplicate whose holder cannot be read back must not hold the queue
// until Close (the Auditor's context lives that long). The read-back is
// bounded to one attempt timeout and the duplicate stands (an audit id is
// one per occurrence: the holder is almost surely this audit), counted as
// suppressed{unverified}; it is not stored a second time, and the audit
// behind it is stored.
func TestAuditorUnreadableDuplicateDoesNotStallTheQueue(t *testing.T) {
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	dup := event(t, "cordon/u1/cordoned/1")
	// Its earlier attempt was stored, its ack lost.
	if _, err := natsx.PublishEvent(ctx, js, "ops.t.cordon.cordoned.n1", dup, time.Second); err != nil {
		t.Fatal(err)
	}
	unverified := func() float64 { return testutil.ToFloat64(natsx.Suppressed.WithLabelValues("unverified")) }
	before := unverified()
	m := NewMetrics(nil)
	a := NewAuditor(unreadable{js}, 200*time.Millisecond, m, zerolog.Nop())
	defer a.Close(100 * time.Millisecond)
	a.Publish("ops.t.cordon.cordoned.n1", dup)
	a.Publish("ops.t.cordon.cordoned.n2", event(t, "cordon/u2/cordoned/1"))
	deadline := time.Now().Add(10 * time.Second)
	for a.Backlog() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := a.Backlog(); n != 0 {
		t.Fatalf("after 10 s: backlog %d (stored %v, retries %v, dropped %v); the unreadable duplicate at the head blocks the audit of n2",
			n, testutil.ToFloat64(m.AuditStored), testutil.ToFloat64(m.AuditRetries), testutil.ToFloat64(m.AuditDropped))
	}
	if got := unverified() - before; got != 1 {
		t.Errorf("suppressed{unverified} rose by %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.AuditDropped); got != 0 {
		t.Errorf("audits dropped: %v, want 0", got)
	}
	s, err := js.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("ops.t.cordon.cordoned.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n1, n2 := info.State.Subjects["ops.t.cordon.cordoned.n1"], info.State.Subjects["ops.t.cordon.cordoned.n2"]; n1 != 1 || n2 != 1 {
		t.Errorf("OPS holds %d audits of n1 (want 1: the duplicate stood) and %d of n2 (want 1)", n1, n2)
	}
}

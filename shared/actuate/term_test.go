package actuate

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/server"
	"github.com/opswire/opswire/shared/testkit"
)

// fakeElector leads terms one after another; the test ends each term
// through the cancel it receives on ends.
type fakeElector struct {
	terms   int
	ends    chan context.CancelFunc
	leading atomic.Bool
}

func newFakeElector(terms int) *fakeElector {
	return &fakeElector{terms: terms, ends: make(chan context.CancelFunc, terms)}
}

func (e *fakeElector) IsLeader() bool { return e.leading.Load() }

func (e *fakeElector) Run(ctx context.Context, work func(context.Context) error) error {
	for range e.terms {
		tctx, cancel := context.WithCancel(ctx)
		e.ends <- cancel
		e.leading.Store(true)
		err := work(tctx)
		e.leading.Store(false)
		cancel()
		if err != nil || ctx.Err() != nil {
			return err
		}
	}
	return nil
}

type fakeReadiness struct {
	mu     sync.Mutex
	checks map[string]server.Check
}

func (r *fakeReadiness) AddReadiness(name string, c server.Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checks == nil {
		r.checks = map[string]server.Check{}
	}
	r.checks[name] = c
}

func (r *fakeReadiness) check(t *testing.T, name string) error {
	t.Helper()
	r.mu.Lock()
	c := r.checks[name]
	r.mu.Unlock()
	if c == nil {
		t.Fatalf("no readiness check %q", name)
	}
	return c()
}

// steps is the order in which a term's parts ran.
type steps struct {
	mu   sync.Mutex
	list []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, step)
}

func (s *steps) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// fakeMirror is loaded when the test calls sync; Run returns err (or nil
// once its context ends).
type fakeMirror struct {
	steps   *steps
	err     error
	synced  chan struct{}
	loaded  atomic.Bool
	stopped chan struct{}
}

func newFakeMirror(s *steps) *fakeMirror {
	return &fakeMirror{steps: s, synced: make(chan struct{}), stopped: make(chan struct{})}
}

func (m *fakeMirror) Run(ctx context.Context) error {
	defer close(m.stopped)
	if m.err != nil {
		return m.err
	}
	<-ctx.Done()
	return nil
}

func (m *fakeMirror) WaitSynced(ctx context.Context) error {
	select {
	case <-m.synced:
		m.steps.add("synced")
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *fakeMirror) Synced() bool { return m.loaded.Load() }

func (m *fakeMirror) sync() {
	m.loaded.Store(true)
	close(m.synced)
}

func (m *fakeMirror) isStopped() bool {
	select {
	case <-m.stopped:
		return true
	default:
		return false
	}
}

// opsWithHistory is OPS after a leader that removed pod a (audited) and
// pod b (journaled; its outcome never stored).
func opsWithHistory(t *testing.T) jetstream.JetStream {
	t.Helper()
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	as, ae := outcome(t, "uid-a", "a")
	if _, err := natsx.PublishEvent(ctx, js, as, ae, time.Second); err != nil {
		t.Fatal(err)
	}
	journal(t, NewJournal(js, time.Second, nil, zerolog.Nop()), "uid-b", "b")
	return js
}

// termActor is the actor side of Lead in these tests: each term gets a
// fresh mirror, and records its window and what the controller saw.
type termActor struct {
	steps   *steps
	audit   *recorder
	runErr  error
	mu      sync.Mutex
	mirrors []*fakeMirror
	windows []*Window
	seen    []int // the window's actions when each term's controller started
}

func (a *termActor) start(w *Window) Term {
	m := newFakeMirror(a.steps)
	a.mu.Lock()
	a.mirrors = append(a.mirrors, m)
	a.windows = append(a.windows, w)
	a.mu.Unlock()
	rec := Recovery{Intents: "ops.c.cleanup.intent.>", Outcomes: []string{"ops.c.cleanup.deleted.>"}, Audit: a.audit,
		Happened: func(context.Context, events.Intent) (bool, error) { return true, nil },
		Live: func(context.Context, time.Time) ([]LiveAction, error) {
			a.steps.add("recover")
			return nil, nil
		}}
	return Term{Mirror: m, Recovery: rec, Run: func(ctx context.Context) error {
		a.mu.Lock()
		a.seen = append(a.seen, w.Len(time.Now()))
		err := a.runErr
		a.mu.Unlock()
		a.steps.add("run")
		if err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}}
}

func (a *termActor) term(i int) (*fakeMirror, *Window) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if i >= len(a.mirrors) {
		return nil, nil
	}
	return a.mirrors[i], a.windows[i]
}

func (a *termActor) started() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.mirrors)
}

func (a *termActor) seenAt(i int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[i]
}

// TestTermsLead: each term gets a fresh window and mirror; the controller
// starts only once the mirror is loaded and the window seeded from OPS (a's
// outcome, b's intent) with b's missing outcome published; the leader is
// unready until its term's mirror is loaded, a standby ready; the
// controller's error ends the term, stops its mirror and is Lead's result.
func TestTermsLead(t *testing.T) {
	js := opsWithHistory(t)
	terms := NewTerms(js, prometheus.NewRegistry(), zerolog.Nop())
	defer terms.Close()
	boom := errors.New("controller failed")
	actor := &termActor{steps: &steps{}, audit: &recorder{}}
	el := newFakeElector(2)
	ready := &fakeReadiness{}
	cfg := TermConfig{MaxActions: 10, Per: time.Minute, Unready: "not loaded"}
	done := make(chan error, 1)
	go func() { done <- terms.Lead(context.Background(), el, ready, cfg, actor.start) }()

	testkit.Eventually(t, 10*time.Second, "the first term", func() bool { return actor.started() == 1 })
	m1, w1 := actor.term(0)
	if err := ready.check(t, "kube-state"); err == nil || err.Error() != "not loaded" {
		t.Fatalf("leader with its mirror not loaded: readiness %v, want %q", err, "not loaded")
	}
	if got := actor.steps.get(); len(got) != 0 {
		t.Fatalf("before the mirror is loaded: %v, want nothing", got)
	}
	m1.sync()
	testkit.Eventually(t, 10*time.Second, "the first controller", func() bool { return slices.Contains(actor.steps.get(), "run") })
	if got, want := actor.steps.get(), []string{"synced", "recover", "run"}; !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	if got := actor.seenAt(0); got != 2 {
		t.Fatalf("the controller started with %d actions in its window, want 2 (a and b)", got)
	}
	actor.audit.mu.Lock()
	published := len(actor.audit.msgs)
	actor.audit.mu.Unlock()
	if published != 1 {
		t.Fatalf("%d outcomes published by the recovery, want b's", published)
	}
	if err := ready.check(t, "kube-state"); err != nil {
		t.Fatalf("leader with its mirror loaded: readiness %v", err)
	}

	actor.mu.Lock()
	actor.runErr = boom // the second term's controller fails
	actor.mu.Unlock()
	(<-el.ends)()
	testkit.Eventually(t, 10*time.Second, "the first term's mirror to stop", m1.isStopped)
	testkit.Eventually(t, 10*time.Second, "the second term", func() bool { return actor.started() == 2 })
	m2, w2 := actor.term(1)
	if w2 == w1 {
		t.Fatal("the second term reuses the first term's window")
	}
	if err := ready.check(t, "kube-state"); err == nil {
		t.Fatal("leader of a new term whose mirror is not loaded: ready")
	}
	m2.sync()
	select {
	case err := <-done:
		if !errors.Is(err, boom) {
			t.Fatalf("Lead = %v, want the controller's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the controller's error did not end the term")
	}
	if !m2.isStopped() {
		t.Fatal("Lead returned before the term's mirror stopped")
	}
	if got := actor.seenAt(1); got != 2 {
		t.Fatalf("the second controller started with %d actions in its window, want 2", got)
	}
	if err := ready.check(t, "kube-state"); err != nil {
		t.Fatalf("standby: readiness %v", err)
	}
}

// TestTermsLeadDryRun: nothing is written in dry-run, so nothing is
// recovered: the controller starts once the mirror is loaded, with an empty
// window although OPS holds actions.
func TestTermsLeadDryRun(t *testing.T) {
	js := opsWithHistory(t)
	terms := NewTerms(js, nil, zerolog.Nop())
	defer terms.Close()
	actor := &termActor{steps: &steps{}, audit: &recorder{}}
	el := newFakeElector(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- terms.Lead(ctx, el, &fakeReadiness{}, TermConfig{MaxActions: 10, Per: time.Minute, DryRun: true}, actor.start)
	}()
	testkit.Eventually(t, 10*time.Second, "the term", func() bool { return actor.started() == 1 })
	m, _ := actor.term(0)
	m.sync()
	testkit.Eventually(t, 10*time.Second, "the controller", func() bool { return slices.Contains(actor.steps.get(), "run") })
	if got, want := actor.steps.get(), []string{"synced", "run"}; !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	if got := actor.seenAt(0); got != 0 {
		t.Fatalf("dry-run window holds %d actions, want 0", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Lead = %v after shutdown, want nil", err)
	}
}

// TestTermsEndBeforeLoaded: a term that ends before its mirror is loaded
// ends without error and never acts; a mirror's error ends its term.
func TestTermsEndBeforeLoaded(t *testing.T) {
	terms := NewTerms(nil, nil, zerolog.Nop())
	defer terms.Close()
	actor := &termActor{steps: &steps{}, audit: &recorder{}}
	el := newFakeElector(1)
	done := make(chan error, 1)
	go func() {
		done <- terms.Lead(context.Background(), el, &fakeReadiness{}, TermConfig{MaxActions: 1, Per: time.Minute}, actor.start)
	}()
	(<-el.ends)()
	if err := <-done; err != nil {
		t.Fatalf("Lead = %v, want nil", err)
	}
	if got := actor.steps.get(); len(got) != 0 {
		t.Fatalf("a term ended before its mirror was loaded ran %v", got)
	}

	lost := errors.New("mirror failed")
	el = newFakeElector(1)
	start := func(w *Window) Term {
		term := actor.start(w)
		term.Mirror.(*fakeMirror).err = lost
		return term
	}
	if err := terms.Lead(context.Background(), el, &fakeReadiness{}, TermConfig{MaxActions: 1, Per: time.Minute}, start); !errors.Is(err, lost) {
		t.Fatalf("Lead = %v, want the mirror's error", err)
	}
}

package natsx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/natstest"
)

// connectJS starts an embedded server and connects to it through Connect.
func connectJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	s := natstest.Start(t)
	nc, err := Connect(Options{URL: s.ClientURL(), Name: "test"}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func TestStreamsAndDedupPublish(t *testing.T) {
	js := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := config.Default().NATS
	for i := 0; i < 2; i++ { // idempotent
		if err := EnsureStreams(ctx, js, cfg); err != nil {
			t.Fatalf("EnsureStreams #%d: %v", i, err)
		}
	}
	ev, _ := envelope.New("pod/u/1", "opswire/t/test", "t.v1", "", map[string]int{"a": 1}, time.Now())
	first, err := PublishEvent(ctx, js, "kube.t.pod.ns.p", ev, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	again, err := PublishEvent(ctx, js, "kube.t.pod.ns.p", ev, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("second publish with the same id: %+v, want duplicate of %+v", again, first)
	}
	// Tombstones carry a per-message TTL, which KUBE must allow.
	tomb, _ := envelope.New("pod/u/delete/2", "opswire/t/test", "t.v1", "", map[string]int{}, time.Now())
	if _, err := PublishEvent(ctx, js, "kube.t.pod.ns.p", tomb, time.Second, jetstream.WithMsgTTL(time.Hour)); err != nil {
		t.Fatalf("publish with TTL: %v", err)
	}
	info, err := js.Stream(ctx, "KUBE")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := info.Info(ctx)
	if st.State.Msgs != 1 {
		t.Fatalf("KUBE holds %d messages for one subject, want 1 (last value only)", st.State.Msgs)
	}
}

// TestWaitStreams: a service that does not manage the streams waits for
// them, returns once another creates them, and gives up with its context.
func TestWaitStreams(t *testing.T) {
	js := connectJS(t)

	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := WaitStreams(short, js, zerolog.Nop(), time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitStreams without streams = %v, want the context's deadline", err)
	}

	ctx, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	done := make(chan error, 1)
	go func() { done <- WaitStreams(ctx, js, zerolog.Nop(), time.Hour) }()
	select {
	case err := <-done:
		t.Fatalf("WaitStreams returned %v before the streams exist", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitStreams after creation: %v", err)
	}
}

func TestInboxPrefix(t *testing.T) {
	for user, want := range map[string]string{
		"cordon": "_INBOX_cordon", "audit": "_INBOX_audit", "": "", "a.b": "", "a*": "", "a>": "", "a b": "",
	} {
		if got := InboxPrefix(user); got != want {
			t.Errorf("InboxPrefix(%q) = %q, want %q", user, got, want)
		}
	}
}

// TestInboxPrefixJetStream: with a custom inbox prefix, JetStream API answers
// and publish acks arrive (nats.go's jetstream replies on the prefix).
func TestInboxPrefixJetStream(t *testing.T) {
	s := natstest.Start(t)
	nc, err := Connect(Options{URL: s.ClientURL(), Name: "test", InboxPrefix: InboxPrefix("cordon")}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if got := nc.NewInbox(); !strings.HasPrefix(got, "_INBOX_cordon.") {
		t.Fatalf("inbox %q, want _INBOX_cordon.*", got)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.x", []byte("1")); err != nil {
		t.Fatal(err)
	}
}

func TestRefusedConsumerDelete(t *testing.T) {
	del := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$JS.API.CONSUMER.DELETE.KUBE.abc_2"`)
	other := fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "kube.default.node.x"`)
	if !refusedConsumerDelete(del) || refusedConsumerDelete(other) || refusedConsumerDelete(errors.New("x")) {
		t.Error("refusedConsumerDelete misclassifies")
	}
}

// readFails is a JetStream context whose reads of a stream fail the first
// fails times (-1: always) while publishes go through.
type readFails struct {
	jetstream.JetStream
	fails atomic.Int32
}

func (j *readFails) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if j.fails.Load() != 0 {
		j.fails.Add(-1)
		return nil, errors.New("JetStream API: timeout")
	}
	return j.JetStream.Stream(ctx, name)
}

// TestUnverifiedDuplicateIsNotRepublished: a duplicate ack whose holder
// cannot be read back is most likely the event itself, so it is never
// republished under a fallback id (that would store it twice). The read-back
// is retried; while it keeps failing PublishEvent fails when its context
// ends, and with UnverifiedStands the duplicate stands.
func TestUnverifiedDuplicateIsNotRepublished(t *testing.T) {
	base := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := EnsureStreams(ctx, base, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	subj := "ops.t.report.restarts"
	ev, _ := envelope.New("report/t/restarts/1", "opswire/t/report", "t.v1", "", map[string]int{}, time.Now())
	first, err := PublishEvent(ctx, base, subj, ev, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	unverified := func() float64 { return testutil.ToFloat64(Suppressed.WithLabelValues("unverified")) }
	js := &readFails{JetStream: base}

	js.fails.Store(2) // a hiccup: the retried read-back proves it ours
	before := unverified()
	if a, err := PublishEvent(ctx, js, subj, ev, time.Second); err != nil || !a.Duplicate || a.Sequence != first.Sequence {
		t.Errorf("read-back failing twice: %+v, %v; want the duplicate of seq %d", a, err, first.Sequence)
	}
	if unverified() != before {
		t.Errorf("suppressed{unverified} rose after a read-back that succeeded on retry")
	}

	js.fails.Store(-1)
	short, cancelShort := context.WithTimeout(ctx, 700*time.Millisecond)
	if a, err := PublishEvent(short, js, subj, ev, time.Second); err == nil {
		t.Errorf("read-back never succeeding: %+v, want an error once the context ends", a)
	}
	cancelShort()
	if a, err := PublishEventWith(ctx, js, subj, ev, 300*time.Millisecond, UnverifiedStands); err != nil || !a.Duplicate {
		t.Errorf("UnverifiedStands: %+v, %v; want the duplicate ack to stand", a, err)
	}
	if got := unverified() - before; got != 2 {
		t.Errorf("suppressed{unverified} rose by %v, want 2", got)
	}
	s, _ := base.Stream(ctx, "OPS")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subj]; n != 1 {
		t.Errorf("OPS holds %d copies of the event, want 1", n)
	}
}

// TestPublishSuppressedByForeignID: the stream deduplicates by Nats-Msg-Id
// across subjects. A message on another subject holding an event's id (the
// report user publishing cleanup's deterministic id on its own subject) must
// not keep the event out: PublishEvent reads the holder back, counts the
// suppression and stores the event under a fallback Nats-Msg-Id with its
// ce-id unchanged. A retry of its own publish is still a plain duplicate.
func TestPublishSuppressedByForeignID(t *testing.T) {
	js := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	foreign := func() float64 { return testutil.ToFloat64(Suppressed.WithLabelValues("foreign")) }
	base := foreign()
	const id = "cleanup/u1/deleted"
	squat := nats.NewMsg("ops.t.report.restarts")
	squat.Header.Set(envelope.HeaderMsgID, id)
	squat.Data = []byte(`{}`)
	if _, err := js.PublishMsg(ctx, squat); err != nil {
		t.Fatal(err)
	}
	ev, _ := envelope.New(id, "opswire/t/cleanup", "t.v1", "", map[string]int{"a": 1}, time.Now())
	subj := "ops.t.cleanup.deleted.ns.p"
	ack, err := PublishEvent(ctx, js, subj, ev, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Duplicate {
		t.Fatalf("ack %+v: the event was not stored", ack)
	}
	if got := foreign() - base; got != 1 {
		t.Errorf("suppressed{foreign} rose by %v, want 1", got)
	}
	s, _ := js.Stream(ctx, "OPS")
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		t.Fatalf("the event is not in OPS: %v", err)
	}
	if m.Header.Get(envelope.HeaderID) != id || m.Header.Get(envelope.HeaderMsgID) != id+"@"+subj {
		t.Errorf("stored ce-id %q Nats-Msg-Id %q, want %q and the fallback %q", m.Header.Get(envelope.HeaderID), m.Header.Get(envelope.HeaderMsgID), id, id+"@"+subj)
	}
	// The next leader publishing the same outcome again: deduplicated under
	// the fallback id, not stored twice.
	again, err := PublishEvent(ctx, js, subj, ev, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.Sequence != ack.Sequence {
		t.Errorf("republish: %+v, want a duplicate of seq %d", again, ack.Sequence)
	}
	// An id held by the event itself (a retry after a lost ack): a duplicate, nothing counted.
	own, _ := envelope.New("cleanup/u2/deleted", "opswire/t/cleanup", "t.v1", "", map[string]int{}, time.Now())
	if _, err := PublishEvent(ctx, js, subj, own, time.Second); err != nil {
		t.Fatal(err)
	}
	before := foreign()
	dup, err := PublishEvent(ctx, js, subj, own, time.Second)
	if err != nil || !dup.Duplicate || foreign() != before {
		t.Errorf("retry of its own publish: %+v, %v, suppressed rose by %v; want a plain duplicate", dup, err, foreign()-before)
	}
	// The fallback id taken too: a random one.
	squat2 := nats.NewMsg("ops.t.report.restarts")
	squat2.Header.Set(envelope.HeaderMsgID, "cleanup/u3/deleted@"+subj)
	squat2.Data = []byte(`{}`)
	squat.Header.Set(envelope.HeaderMsgID, "cleanup/u3/deleted")
	for _, m := range []*nats.Msg{squat, squat2} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	third, _ := envelope.New("cleanup/u3/deleted", "opswire/t/cleanup", "t.v1", "", map[string]int{}, time.Now())
	if a, err := PublishEvent(ctx, js, subj, third, time.Second); err != nil || a.Duplicate {
		t.Fatalf("both ids held: %+v, %v; want stored under a random fallback", a, err)
	}
}

// TestDuplicateAckOfAVanishedHolderIsStored: the message holding an event's
// Nats-Msg-Id was removed from OPS inside the duplicate window (OpsMaxBytes
// discarding old messages, `nats stream rmm`). The stream then holds no copy
// of the event, so republishing it under the fallback id cannot store it
// twice: in both modes it is stored ("gone"), where an unreadable holder is
// not republished (TestUnverifiedDuplicateIsNotRepublished).
func TestDuplicateAckOfAVanishedHolderIsStored(t *testing.T) {
	js := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	gone := func() float64 { return testutil.ToFloat64(Suppressed.WithLabelValues("gone")) }
	for i, mode := range []Unverified{UnverifiedFails, UnverifiedStands} {
		subj := "ops.t.cordon.cordoned"
		if mode == UnverifiedStands {
			subj = "ops.t.report.restarts"
		}
		ev, _ := envelope.New("t/vanished/"+string(rune('a'+i)), "opswire/t/x", "t.v1", "", map[string]int{}, time.Now())
		first, err := PublishEvent(ctx, js, subj, ev, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteMsg(ctx, first.Sequence); err != nil {
			t.Fatal(err)
		}
		before := gone()
		a, err := PublishEventWith(ctx, js, subj, ev, time.Second, mode)
		info, ierr := s.Info(ctx, jetstream.WithSubjectFilter(subj))
		if ierr != nil {
			t.Fatal(ierr)
		}
		if n := info.State.Subjects[subj]; err != nil || n != 1 {
			t.Errorf("mode %d: holder gone, republish: ack %+v, err %v; OPS holds %d copies, want 1 (stored under the fallback id)", mode, a, err, n)
		}
		if got := gone() - before; got != 1 {
			t.Errorf("mode %d: suppressed{gone} rose by %v, want 1", mode, got)
		}
		// A retry (or the next leader) finds its fallback copy: a duplicate.
		if a, err := PublishEventWith(ctx, js, subj, ev, time.Second, mode); err != nil || !a.Duplicate {
			t.Errorf("mode %d: retry after the fallback copy: %+v, %v; want a duplicate", mode, a, err)
		}
	}
}

// notFoundStream answers a direct get "not found" while the message is
// there: a replica still catching up answering for the stream.
type notFoundStream struct {
	jetstream.Stream
	misses *atomic.Int32
}

func (s notFoundStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	if s.misses.Load() > 0 {
		s.misses.Add(-1)
		return nil, jetstream.ErrMsgNotFound
	}
	return s.Stream.GetMsg(ctx, seq, opts...)
}

type laggingReplica struct {
	jetstream.JetStream
	misses atomic.Int32
}

func (j *laggingReplica) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return notFoundStream{Stream: s, misses: &j.misses}, nil
}

// TestNotFoundFromALaggingReplicaIsNotGone: a direct get answered "not found"
// by a replica that has not applied the message yet is no proof the holder is
// gone; only the stream leader's state is. The read-back is retried and finds
// the event itself: nothing is republished.
func TestNotFoundFromALaggingReplicaIsNotGone(t *testing.T) {
	base := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := EnsureStreams(ctx, base, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	subj := "ops.t.report.restarts"
	ev, _ := envelope.New("report/t/restarts/lag", "opswire/t/report", "t.v1", "", map[string]int{}, time.Now())
	first, err := PublishEvent(ctx, base, subj, ev, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	js := &laggingReplica{JetStream: base}
	for _, mode := range []Unverified{UnverifiedFails, UnverifiedStands} {
		js.misses.Store(2)
		if a, err := PublishEventWith(ctx, js, subj, ev, time.Second, mode); err != nil || !a.Duplicate || a.Sequence != first.Sequence {
			t.Errorf("mode %d: %+v, %v; want the duplicate of seq %d to stand", mode, a, err, first.Sequence)
		}
	}
	s, _ := base.Stream(ctx, "OPS")
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subj]; n != 1 {
		t.Errorf("OPS holds %d copies of the event, want 1", n)
	}
}

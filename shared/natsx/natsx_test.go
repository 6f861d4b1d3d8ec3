package natsx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

package harness

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
)

// Msg is one stored message as a test sees it.
type Msg struct {
	Subject string
	Header  nats.Header
	Data    []byte
	Type    string // ce-type
	ID      string // ce-id
	Seq     uint64 // stream sequence
}

// Collector reads a stream with an ordered consumer and keeps every message.
type Collector struct {
	mu   sync.Mutex
	msgs []Msg
}

// CollectOps collects OPS messages matching filter (e.g. "ops.>").
func CollectOps(t testing.TB, n *NATS, filter string) *Collector {
	return Collect(t, n.JS, "OPS", filter, jetstream.DeliverAllPolicy)
}

// Collect reads stream from the start (or per policy) until the test ends.
func Collect(t testing.TB, js jetstream.JetStream, stream, filter string, policy jetstream.DeliverPolicy) *Collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := &Collector{}
	var cons jetstream.Consumer
	Eventually(t, 30*time.Second, "stream "+stream+" to exist", func() bool {
		var err error
		cons, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{filter}, DeliverPolicy: policy,
		})
		return err == nil
	})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		msg := Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if h := m.Headers(); h != nil {
			msg.Type, msg.ID = h.Get(envelope.HeaderType), h.Get(envelope.HeaderID)
		}
		if md, err := m.Metadata(); err == nil {
			msg.Seq = md.Sequence.Stream
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, msg)
		c.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("consume %s: %v", stream, err)
	}
	t.Cleanup(cc.Stop)
	return c
}

// All returns a copy of what was collected so far.
func (c *Collector) All() []Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Msg(nil), c.msgs...)
}

// Count returns how many collected messages match.
func (c *Collector) Count(match func(Msg) bool) int {
	n := 0
	for _, m := range c.All() {
		if match(m) {
			n++
		}
	}
	return n
}

// WaitFor polls until a message matches and returns the first match.
func (c *Collector) WaitFor(t testing.TB, timeout time.Duration, what string, match func(Msg) bool) Msg {
	t.Helper()
	var found Msg
	Eventually(t, timeout, what, func() bool {
		for _, m := range c.All() {
			if match(m) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// Subject matches messages on exactly this subject.
func Subject(s string) func(Msg) bool { return func(m Msg) bool { return m.Subject == s } }

// Describe lists what was collected, one message per line (subject and
// payload), for failure messages.
func (c *Collector) Describe() string {
	var b strings.Builder
	for _, m := range c.All() {
		fmt.Fprintf(&b, "\n  #%d %s %s", m.Seq, m.Subject, m.Data)
	}
	return b.String()
}

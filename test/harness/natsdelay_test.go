package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSDelayHoldsMatchingPublishesInOrder: a publish to a matching
// subject reaches the server the delay later, those sent after it wait
// behind it, those before it do not; payloads (one that looks like
// protocol) and headers arrive intact.
func TestNATSDelayHoldsMatchingPublishesInOrder(t *testing.T) {
	n := StartNATS(t)
	const delay = 400 * time.Millisecond
	p := StartNATSDelay(t, n.URL, delay, func(subj string) bool { return strings.HasPrefix(subj, "slow.") })

	type got struct {
		subj, data, hdr string
		at              time.Time
	}
	ch := make(chan got, 8)
	sub, err := n.Conn.Subscribe("*.*", func(m *nats.Msg) {
		ch <- got{m.Subject, string(m.Data), m.Header.Get("X-Test"), time.Now()}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(p.URL)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	defer nc.Close()
	start := time.Now()
	tricky := "PUB slow.x 2\r\nhi\r\n" // payload that looks like protocol
	if err := nc.Publish("fast.1", []byte(tricky)); err != nil {
		t.Fatal(err)
	}
	hm := nats.NewMsg("slow.1")
	hm.Header.Set("X-Test", "kept")
	hm.Data = []byte("held")
	if err := nc.PublishMsg(hm); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("fast.2", []byte("behind")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // a PING behind the held message: its PONG comes after the delay
		t.Fatal(err)
	}
	if d := time.Since(start); d < delay {
		t.Errorf("flush answered after %v, want at least the delay %v", d, delay)
	}

	want := []got{{subj: "fast.1", data: tricky}, {subj: "slow.1", data: "held", hdr: "kept"}, {subj: "fast.2", data: "behind"}}
	for i, w := range want {
		var g got
		select {
		case g = <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d (%s) never arrived", i, w.subj)
		}
		if g.subj != w.subj || g.data != w.data || g.hdr != w.hdr {
			t.Fatalf("message %d = %q %q header %q, want %q %q header %q", i, g.subj, g.data, g.hdr, w.subj, w.data, w.hdr)
		}
		at := g.at.Sub(start)
		if held := i > 0; held != (at >= delay) {
			t.Errorf("%s arrived after %v; held=%v with a delay of %v", g.subj, at, held, delay)
		}
	}
	if d := p.Delayed(); d != 1 {
		t.Errorf("Delayed() = %d, want 1", d)
	}
}

// TestNATSDelaySlowsAKVPut: JetStream works through the proxy, and a KV put
// to a matching key takes the delay while one to another key does not.
func TestNATSDelaySlowsAKVPut(t *testing.T) {
	n := StartNATS(t)
	const delay = 500 * time.Millisecond
	p := StartNATSDelay(t, n.URL, delay, func(subj string) bool { return strings.HasPrefix(subj, "$KV.b.slow") })
	nc, err := nats.Connect(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "b"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(key string) time.Duration {
		t0 := time.Now()
		if _, err := kv.Put(ctx, key, []byte(key)); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return time.Since(t0)
	}
	if d := put("fast"); d >= delay {
		t.Errorf("put to an unmatched key took %v", d)
	}
	if d := put("slow"); d < delay {
		t.Errorf("put to a matched key took %v, want at least %v", d, delay)
	}
	e, err := kv.Get(ctx, "slow")
	if err != nil || string(e.Value()) != "slow" {
		t.Fatalf("get slow = %v, %v", e, err)
	}
	if d := p.Delayed(); d != 1 {
		t.Errorf("Delayed() = %d, want 1", d)
	}
}

package kubestate

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

type replyMsg struct {
	fuzzMsg
	reply string
}

func (m replyMsg) Reply() string { return m.reply }

// metadataRef is what jetstream's Msg.Metadata reads from a reply subject
// (nats.go v1.55.0 internal/parser.GetMetadataFields and ParseNum, copied):
// the reference ackMeta is held to.
func metadataRef(subj string) (seq, pending uint64, stampNs int64, ok bool) {
	const domain, sseq, tm, pend = 2, 7, 9, 10
	var tokens [pend + 1]string
	n := strings.Count(subj, ".") + 1
	if n < 9 || (n > 9 && n < 11) || !strings.HasPrefix(subj, "$JS.ACK.") {
		return 0, 0, 0, false
	}
	for i := range tokens {
		if n == 9 && (i == domain || i == domain+1) {
			continue
		}
		tokens[i], subj, _ = strings.Cut(subj, ".")
	}
	num := func(d string) (n uint64) {
		for _, c := range d {
			if c < '0' || c > '9' {
				return 0
			}
			n = n*10 + uint64(c) - '0'
		}
		return n
	}
	return num(tokens[sseq]), num(tokens[pend]), int64(num(tokens[tm])), true
}

func FuzzAckMeta(f *testing.F) {
	f.Add("$JS.ACK.KUBE.c1.1.42.42.1764583200000000000.7")
	f.Add("$JS.ACK._.ABCDEF.KUBE.c1.1.42.42.1764583200000000000.7.x")
	f.Add("$JS.ACK.hub.ABCDEF.KUBE.c1.1.42.42.1764583200000000000.0")
	f.Add("$JS.ACK.d.h.KUBE.c.1.42.42.17.0.x.y.z")
	f.Add("$JS.ACK.KUBE.c1.1.4x2.42.-1.7")
	f.Add("$JS.ACK.KUBE.c1.1.42.42.1.7.8")
	f.Add("$JS.ACK.KUBE.c1.1.42.42.1")
	f.Add("$JS.ACK.KUBE.c1.1.42.42.99999999999999999999999.٣")
	f.Add("_INBOX.abc")
	f.Add("")
	f.Fuzz(func(t *testing.T, reply string) {
		seq, pending, ns, ok := ackMeta(replyMsg{reply: reply})
		wseq, wpending, wns, wok := metadataRef(reply)
		if ok != wok || ok && (seq != wseq || pending != wpending || ns != wns) {
			t.Fatalf("ackMeta(%q) = %d %d %d %v, Metadata reads %d %d %d %v", reply, seq, pending, ns, ok, wseq, wpending, wns, wok)
		}
	})
}

// TestAckMetaMatchesMetadata: on messages a real server delivered, ackMeta
// reads what jetstream's Metadata reads.
func TestAckMetaMatchesMetadata(t *testing.T) {
	ctx, js := withStreams(t)
	for i := range 3 {
		publish(t, js, subject.Pod("c", "ns", "p"+string(rune('0'+i))), "pod/u/"+string(rune('0'+i)), events.TypePod, events.PodState{Name: "p"})
	}
	cons, err := js.OrderedConsumer(ctx, subject.KubeStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject.Kube("c")}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		msg, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		md, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		seq, pending, ns, ok := ackMeta(msg)
		if !ok || seq != md.Sequence.Stream || pending != md.NumPending || !time.Unix(0, ns).Equal(md.Timestamp) {
			t.Fatalf("ackMeta(%q) = %d %d %v %v, Metadata %d %d %v", msg.Reply(), seq, pending, time.Unix(0, ns), ok,
				md.Sequence.Stream, md.NumPending, md.Timestamp)
		}
	}
}

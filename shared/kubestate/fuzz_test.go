package kubestate

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// fuzzMsg is a KUBE message as the mirror's consumer hands it over.
type fuzzMsg struct {
	subj string
	h    nats.Header
	data []byte
}

func (m fuzzMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, jetstream.ErrNotJSMessage }
func (m fuzzMsg) Data() []byte                              { return m.data }
func (m fuzzMsg) Headers() nats.Header                      { return m.h }
func (m fuzzMsg) Subject() string                           { return m.subj }
func (m fuzzMsg) Reply() string                             { return "" }
func (m fuzzMsg) Ack() error                                { return nil }
func (m fuzzMsg) DoubleAck(context.Context) error           { return nil }
func (m fuzzMsg) Nak() error                                { return nil }
func (m fuzzMsg) NakWithDelay(time.Duration) error          { return nil }
func (m fuzzMsg) InProgress() error                         { return nil }
func (m fuzzMsg) Term() error                               { return nil }
func (m fuzzMsg) TermWithReason(string) error               { return nil }

// FuzzDecode: whatever lands on kube.> (a buggy or hostile publisher, an
// older watcher) must decode to an object, a deletion or an error the mirror
// terminates; never a panic, and never an object of the wrong kind.
func FuzzDecode(f *testing.F) {
	pod, _ := envelope.New("pod/u/1", "opswire/c/watcher", events.TypePod, "", events.PodState{Namespace: "ns", Name: "p"}, time.Unix(0, 0))
	node, _ := envelope.New("node/u/1", "opswire/c/watcher", events.TypeNode, "", events.NodeState{Name: "n"}, time.Unix(0, 0))
	f.Add("kube.c.pod.ns.p", events.TypePod, pod.Data)
	f.Add("kube.c.node.n", events.TypeNode, node.Data)
	f.Add("kube.c.pod.ns.p", events.TypeNode, node.Data)
	f.Add("kube.c.node.n", events.TypeNode, []byte(`{"op":"delete"}`))
	f.Add("kube.c.pod.ns.p", events.TypePod, []byte(`{"containers":[{"restartCount":-1}]}`))
	f.Fuzz(func(t *testing.T, subj, typ string, data []byte) {
		h := pod.Msg(subj).Header
		h.Set(envelope.HeaderType, typ)
		d := decode(fuzzMsg{subj: subj, h: h, data: data}, &events.Interner{})
		if d.err != nil {
			return
		}
		if (d.pod != nil && d.node != nil) || (d.pod == nil && d.node == nil && !d.gone) {
			t.Fatalf("decode(%q) = pod %v node %v gone %v", subj, d.pod != nil, d.node != nil, d.gone)
		}
		if d.pod != nil && d.ref.Kind != "pod" || d.node != nil && d.ref.Kind != "node" {
			t.Fatalf("decode(%q) gave an object of another kind than its subject", subj)
		}
	})
}

package kubestate

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// fuzzInterner is shared by the inputs of one fuzzing process, as the
// mirror shares one across messages.
var fuzzInterner = &events.Interner{}

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
// terminates; never a panic, never an object of the wrong kind, and always
// what encoding/json would have read (envelope.Decode).
func FuzzDecode(f *testing.F) {
	pod, _ := envelope.New("pod/u/1", "opswire/c/watcher", events.TypePod, "", events.PodState{Namespace: "ns", Name: "p"}, time.Unix(0, 0))
	node, _ := envelope.New("node/u/1", "opswire/c/watcher", events.TypeNode, "", events.NodeState{Name: "n"}, time.Unix(0, 0))
	f.Add("kube.c.pod.ns.p", events.TypePod, pod.Data)
	f.Add("kube.c.node.n", events.TypeNode, node.Data)
	f.Add("kube.c.pod.ns.p", events.TypeNode, node.Data)
	f.Add("kube.c.node.n", events.TypeNode, []byte(`{"op":"delete"}`))
	f.Add("kube.c.pod.ns.p", events.TypePod, []byte(`{"containers":[{"restartCount":-1}]}`))
	f.Add("kube.c.pod.ns.p", events.TypePod, []byte(`{"op":"upsert","name":"a\"b","NAME":"x","owner":null,"future":[1.5e3,{"k":true}],"labels":{"a":"1","a":"2"}}`))
	f.Add("kube.c.node.n", events.TypeNode, []byte(`{"op":"upsert","name":"n","pods":12,"taints":[{"key":"k","effect":"NoSchedule"}],"readySince":"2026-12-01T10:00:00+01:00"}`))
	f.Fuzz(func(t *testing.T, subj, typ string, data []byte) {
		h := pod.Msg(subj).Header
		h.Set(envelope.HeaderType, typ)
		d := decode(fuzzMsg{subj: subj, h: h, data: data}, fuzzInterner, kindSet{pods: true, nodes: true})
		// The mirror's decoders must read exactly what encoding/json reads.
		switch ref, err := subject.ParseKube(subj); {
		case err != nil || len(data) == 0:
		case ref.Kind == subject.KindPod:
			var want events.PodState
			_, werr := envelope.Decode(h, data, events.TypePod, &want)
			if (werr == nil) != (d.err == nil) || werr == nil && !reflect.DeepEqual(*d.pod, want) {
				t.Fatalf("pod %q: mirror %+v (%v), encoding/json %+v (%v)", data, d.pod, d.err, want, werr)
			}
		case ref.Kind == subject.KindNode:
			var want events.NodeState
			_, werr := envelope.Decode(h, data, events.TypeNode, &want)
			if (werr == nil) != (d.err == nil) || werr == nil && !reflect.DeepEqual(*d.node, want) {
				t.Fatalf("node %q: mirror %+v (%v), encoding/json %+v (%v)", data, d.node, d.err, want, werr)
			}
		}
		if d.err != nil {
			return
		}
		if (d.pod != nil && d.node != nil) || (d.pod == nil && d.node == nil && !d.gone && !d.skip) {
			t.Fatalf("decode(%q) = pod %v node %v gone %v", subj, d.pod != nil, d.node != nil, d.gone)
		}
		if d.pod != nil && d.key != subj {
			t.Fatalf("decode(%q) keys the pod as %q", subj, d.key)
		}
		if d.pod != nil && d.ref.Kind != "pod" || d.node != nil && d.ref.Kind != "node" {
			t.Fatalf("decode(%q) gave an object of another kind than its subject", subj)
		}
	})
}

package watcher

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/subject"
)

// LoadSeed reads the last stored state of every object of the cluster from
// KUBE and returns what the watcher needs to compare against. Tombstones and
// undecodable messages are left out (the object is then treated as unknown and
// republished if it exists). It fails rather than wait when KUBE cannot be
// read; the caller retries.
func LoadSeed(ctx context.Context, js jetstream.JetStream, cluster string) (map[string]record, error) {
	cons, err := js.OrderedConsumer(ctx, subject.KubeStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject.Kube(cluster)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		// One attempt at each replacement consumer, then an error: the caller
		// retries with a new consumer name (kubestate.OrderedResetAttempts
		// says why nats.go's endless retry under one name can stall).
		MaxResetAttempts: kubestate.OrderedResetAttempts,
	})
	if err != nil {
		return nil, fmt.Errorf("read KUBE: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read KUBE: %w", err)
	}
	seed := make(map[string]record, info.NumPending)
	if info.NumPending == 0 {
		return seed, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return nil, fmt.Errorf("read KUBE: %w", err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("read KUBE: %w", err)
		}
		addSeed(seed, msg)
		md, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		if md.NumPending == 0 {
			return seed, nil
		}
	}
}

func addSeed(seed map[string]record, msg jetstream.Msg) {
	ref, err := subject.ParseKube(msg.Subject())
	if err != nil || len(msg.Data()) == 0 {
		return
	}
	e, err := envelope.Parse(msg.Headers(), msg.Data())
	if err != nil {
		return
	}
	switch ref.Kind {
	case subject.KindPod:
		var s events.PodState
		if e.Type != events.TypePod || json.Unmarshal(msg.Data(), &s) != nil || s.Op == events.OpDelete {
			return
		}
		node := ""
		if s.NodeName != "" && !s.Terminated() {
			node = s.NodeName
		}
		seed[podPrefix+ref.Namespace+"/"+ref.Name] = record{hash: hashPod(s), uid: s.UID, node: node, evicting: node != "" && s.EvictedByAPI(),
			exempt: drainExempt(&s)}
	case subject.KindNode:
		var s events.NodeState
		if e.Type != events.TypeNode || json.Unmarshal(msg.Data(), &s) != nil || s.Op == events.OpDelete {
			return
		}
		seed[nodePrefix+ref.Name] = record{hash: hashNode(s), uid: s.UID, left: departures{all: s.Departed, evicted: s.DepartedEvicted,
			unknown: s.DepartedUnknown, streak: s.EvictionStreak}, pods: s.Pods}
	}
}

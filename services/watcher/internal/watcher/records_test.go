package watcher

import (
	"encoding/json"
	"hash/fnv"
	"testing"

	"github.com/opswire/opswire/shared/events"
)

func TestRecordsRoundTrip(t *testing.T) {
	s := newRecords(0)
	in := map[string]record{
		podPrefix + "ns/a": {hash: 1, uid: "u-a", node: "n1", evicting: true},
		podPrefix + "ns/b": {hash: 2, uid: "u-b", node: "n2", doubt: true, exempt: true},
		podPrefix + "ns/c": {hash: 3, uid: "u-c"},
		podPrefix + "ns/d": {hash: 4, uid: "u-d", node: "n1", doubt: true, evicting: true, exempt: true},
		nodePrefix + "n1":  {hash: 5, uid: "u-n1", doubt: true, left: departures{all: 3, evicted: 1, unknown: 1, streak: 2}},
	}
	for k, r := range in {
		s.set(k, r)
	}
	if s.len() != len(in) {
		t.Fatalf("len %d, want %d", s.len(), len(in))
	}
	for k, r := range in {
		if got, ok := s.get(k); !ok || got != r {
			t.Errorf("%s: got %+v %v, want %+v", k, got, ok, r)
		}
	}
	s.del(podPrefix + "ns/a")
	s.del(nodePrefix + "n1")
	if _, ok := s.get(podPrefix + "ns/a"); ok {
		t.Error("ns/a still recorded")
	}
	if _, ok := s.get(nodePrefix + "n1"); ok {
		t.Error("n1 still recorded")
	}
	if len(s.nodeNames) != 3 {
		t.Errorf("node table %v: want one entry per node name", s.nodeNames)
	}
}

// hashJSON hashes the bytes json.Marshal writes (FNV-64a), though it encodes
// into a pooled buffer: hashes stay what they were before that change.
func TestHashJSONIsFNVOfMarshal(t *testing.T) {
	s := events.PodState{Op: events.OpUpsert, UID: "u", Namespace: "ns", Name: "p <&>", NodeName: "n", Phase: "Running"}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	if got, want := hashJSON(s), h.Sum64(); got != want {
		t.Fatalf("hashJSON = %x, want FNV-64a of json.Marshal %x", got, want)
	}
}

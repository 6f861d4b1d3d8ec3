package watcher

import (
	"encoding/json"
	"hash/fnv"
	"strings"
	"testing"
	"unsafe"

	"github.com/opswire/opswire/shared/events"
)

func TestRecordsRoundTrip(t *testing.T) {
	s := newRecords()
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

// filedUnder returns the string pod key's record is filed under.
func filedUnder(t *testing.T, s *records, key string) string {
	t.Helper()
	ns, name := splitPodKey(key)
	for k := range s.pods[ns] {
		if k == name {
			return k
		}
	}
	t.Fatalf("%s: no record", key)
	return ""
}

func sameBytes(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// Pod records are filed by namespace and name: every key keeps its own
// record, overwrites do not count twice, and a namespace whose last record
// goes leaves no map behind.
func TestRecordsPodKeys(t *testing.T) {
	s := newRecords()
	keys := []string{podPrefix + "ns/a", podPrefix + "other/a", podPrefix + "ns/b", podPrefix + "x", podPrefix + "ns/"}
	for i, k := range keys {
		s.set(k, record{hash: uint64(i + 1), uid: "u" + k})
		s.set(k, record{hash: uint64(i + 10), uid: "u" + k})
	}
	s.set(nodePrefix+"ns", record{hash: 99})
	if s.len() != len(keys)+1 {
		t.Fatalf("len %d, want %d", s.len(), len(keys)+1)
	}
	for i, k := range keys {
		if got, ok := s.get(k); !ok || got != (record{hash: uint64(i + 10), uid: "u" + k}) {
			t.Errorf("%s: got %+v %v", k, got, ok)
		}
	}
	if _, ok := s.get(podPrefix + "ns/c"); ok {
		t.Error("ns/c: a record never set")
	}
	for _, k := range keys {
		s.del(k)
		s.del(k)
	}
	s.del(podPrefix + "never/set")
	if s.len() != 1 || len(s.pods) != 0 {
		t.Fatalf("after deleting every pod: len %d, %d namespace maps", s.len(), len(s.pods))
	}
	if got, ok := s.get(nodePrefix + "ns"); !ok || got.hash != 99 {
		t.Errorf("node record: got %+v %v", got, ok)
	}
}

// A record built from a cached pod is filed under the pod's own Name string
// (which lies in its cached block), not under the queue key's bytes; refresh
// files it again under the newer version's name, and only when the uid is
// the one recorded.
func TestRecordsFiledUnderCachedName(t *testing.T) {
	key := podPrefix + "ns/web-1"
	cachedName := func() string { return strings.Clone("web-1") }
	cases := []struct {
		name    string
		run     func(s *records, name string)
		wantOwn bool // filed under name, else under key's bytes
		want    record
	}{
		{"set uses the key", func(s *records, _ string) { s.set(key, record{hash: 1, uid: "u1"}) }, false, record{hash: 1, uid: "u1"}},
		{"setNamed uses the name", func(s *records, n string) { s.setNamed(key, n, record{hash: 1, uid: "u1", node: "n1"}) }, true,
			record{hash: 1, uid: "u1", node: "n1"}},
		{"setNamed with another name uses the key", func(s *records, _ string) {
			s.setNamed(key, "web-2", record{hash: 1, uid: "u1"})
		}, false, record{hash: 1, uid: "u1"}},
		{"setNamed with no name uses the key", func(s *records, _ string) { s.setNamed(key, "", record{hash: 1, uid: "u1"}) }, false,
			record{hash: 1, uid: "u1"}},
		{"setNamed over a record set by key", func(s *records, n string) {
			s.set(key, record{hash: 1, uid: "u1"})
			s.setNamed(key, n, record{hash: 2, uid: "u2", doubt: true})
		}, true, record{hash: 2, uid: "u2", doubt: true}},
		{"set over a record set by name", func(s *records, n string) {
			s.setNamed(key, n, record{hash: 1, uid: "u1"})
			s.set(key, record{hash: 2, uid: "u1", exempt: true})
		}, false, record{hash: 2, uid: "u1", exempt: true}},
		{"refresh files a seeded record under the name", func(s *records, n string) {
			s.set(key, record{hash: 1, uid: "u1", node: "n1", evicting: true})
			s.refresh(key, n, strings.Clone("u1"))
		}, true, record{hash: 1, uid: "u1", node: "n1", evicting: true}},
		{"refresh with another uid changes nothing", func(s *records, n string) {
			s.set(key, record{hash: 1, uid: "u1"})
			s.refresh(key, n, "u2")
		}, false, record{hash: 1, uid: "u1"}},
		{"refresh of no record adds none", func(s *records, n string) { s.refresh(podPrefix+"ns/other", n, "u1") }, false, record{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newRecords()
			name := cachedName()
			c.run(s, name)
			got, ok := s.get(key)
			if c.want == (record{}) {
				if ok || s.len() != 0 {
					t.Fatalf("got %+v, len %d: want no record", got, s.len())
				}
				return
			}
			if !ok || got != c.want {
				t.Fatalf("got %+v %v, want %+v", got, ok, c.want)
			}
			if s.len() != 1 {
				t.Errorf("len %d, want 1", s.len())
			}
			if own := sameBytes(filedUnder(t, s, key), name); own != c.wantOwn {
				t.Errorf("filed under the cached name: %v, want %v", own, c.wantOwn)
			}
		})
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

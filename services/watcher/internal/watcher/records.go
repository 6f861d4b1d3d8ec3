package watcher

import "strings"

// records holds what was last stored for each key (record), packed: at
// 150,000 pods a map of full records (64 bytes each, plus the key) was the
// watcher's largest map after the informer's, ~20 MB. A pod's record keeps
// its node as an index into a table of node names (pods share a few thousand
// nodes) and its flags in one byte, 32 bytes in all; node records, a few
// thousand, stay whole (they carry the departure totals).
//
// The node-name table only grows: one entry per node name pods ever counted
// on, a few bytes each (a cluster replacing all of 5,000 nodes every day
// adds ~0.5 MB a year, and a restart starts the table afresh).
type records struct {
	pods  map[string]podRecord
	nodes map[string]record
	// nodeNames[i] is the name of node id i; id 0 is "" (no node).
	nodeNames []string
	nodeIDs   map[string]uint32
}

type podRecord struct {
	hash  uint64
	uid   string
	node  uint32
	flags uint8
}

const (
	recDoubt uint8 = 1 << iota
	recEvicting
	recExempt
)

func newRecords(size int) *records {
	return &records{
		pods: make(map[string]podRecord, size), nodes: map[string]record{},
		nodeNames: []string{""}, nodeIDs: map[string]uint32{"": 0},
	}
}

func isPodKey(key string) bool { return strings.HasPrefix(key, podPrefix) }

func (s *records) get(key string) (record, bool) {
	if !isPodKey(key) {
		r, ok := s.nodes[key]
		return r, ok
	}
	p, ok := s.pods[key]
	if !ok {
		return record{}, false
	}
	return record{hash: p.hash, uid: p.uid, node: s.nodeNames[p.node],
		doubt: p.flags&recDoubt != 0, evicting: p.flags&recEvicting != 0, exempt: p.flags&recExempt != 0}, true
}

// set stores r for key. A pod's record never carries departure totals
// (record.left is for nodes), so packing drops nothing.
func (s *records) set(key string, r record) {
	if !isPodKey(key) {
		s.nodes[key] = r
		return
	}
	id, ok := s.nodeIDs[r.node]
	if !ok {
		id = uint32(len(s.nodeNames))
		s.nodeNames = append(s.nodeNames, r.node)
		s.nodeIDs[r.node] = id
	}
	p := podRecord{hash: r.hash, uid: r.uid, node: id}
	if r.doubt {
		p.flags |= recDoubt
	}
	if r.evicting {
		p.flags |= recEvicting
	}
	if r.exempt {
		p.flags |= recExempt
	}
	s.pods[key] = p
}

// refreshUID points the uid of pod key's record at uid, the same value read
// from the cached pod now in the informer's store. A cached pod's uid lies in
// its one-block allocation (compact.PodTransform): a record kept across an
// update that changed nothing it hashes must not keep the uid of the version
// it was published from, which would pin that version's whole block (512
// bytes, its labels map besides) beside the block the cache holds.
func (s *records) refreshUID(key, uid string) {
	if p, ok := s.pods[key]; ok && p.uid == uid {
		p.uid = uid
		s.pods[key] = p
	}
}

func (s *records) del(key string) {
	if isPodKey(key) {
		delete(s.pods, key)
	} else {
		delete(s.nodes, key)
	}
}

func (s *records) len() int { return len(s.pods) + len(s.nodes) }

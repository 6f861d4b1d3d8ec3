package watcher

import "strings"

// records holds what was last stored for each key (record), packed: at
// 150,000 pods a map of full records (64 bytes each, plus the key) was the
// watcher's largest map after the informer's, ~20 MB. A pod's record keeps
// its node as an index into a table of node names (pods share a few thousand
// nodes) and its flags in one byte, 32 bytes in all; node records, a few
// thousand, stay whole (they carry the departure totals).
//
// Pod records are kept by namespace, then by name, and the name a record is
// filed under is the cached pod's own Name when the record was built from it
// (setNamed, refresh): that string lies in the pod's one-block allocation
// (compact.PodTransform), as the record's uid does, so a record costs no key
// allocation of its own. Filed under its full queue key ("p/<ns>/<name>"), every
// pod kept a 32- to 64-byte string for the map alone (~5 MB at 150,000 pods).
// A record filed otherwise (seeded from KUBE, a doubt) keeps the bytes of the
// key it was set with until the pod's next sync files it again.
//
// The node-name table only grows: one entry per node name pods ever counted
// on, a few bytes each (a cluster replacing all of 5,000 nodes every day
// adds ~0.5 MB a year, and a restart starts the table afresh).
type records struct {
	// pods[namespace][name]; a namespace without records has no map.
	pods  map[string]map[string]podRecord
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

func newRecords() *records {
	return &records{
		pods: map[string]map[string]podRecord{}, nodes: map[string]record{},
		nodeNames: []string{""}, nodeIDs: map[string]uint32{"": 0},
	}
}

func isPodKey(key string) bool { return strings.HasPrefix(key, podPrefix) }

// splitPodKey splits a pod key "p/<namespace>/<name>" (neither part holds a
// slash). Only such keys reach it (podKey, and a tombstone's key from the
// namespace key function): "p/x" and "p/x/" would share a slot.
func splitPodKey(key string) (ns, name string) {
	ns, name, _ = strings.Cut(key[len(podPrefix):], "/")
	return ns, name
}

func (s *records) get(key string) (record, bool) {
	if !isPodKey(key) {
		r, ok := s.nodes[key]
		return r, ok
	}
	ns, name := splitPodKey(key)
	p, ok := s.pods[ns][name]
	if !ok {
		return record{}, false
	}
	return record{hash: p.hash, uid: p.uid, node: s.nodeNames[p.node],
		doubt: p.flags&recDoubt != 0, evicting: p.flags&recEvicting != 0, exempt: p.flags&recExempt != 0}, true
}

// set stores r for key. A pod's record never carries departure totals
// (record.left is for nodes), so packing drops nothing. A pod's record is
// filed under the name part of key (setNamed says why that matters).
func (s *records) set(key string, r record) { s.setNamed(key, "", r) }

// setNamed is set for a pod whose cached state has Name name (the same value
// as key's name part, from the cached pod): the record is filed under that
// string, which costs nothing the cached pod does not hold already. An empty
// or different name files it under key's name part.
func (s *records) setNamed(key, name string, r record) {
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
	s.file(key, name, p)
}

// file stores p for pod key under name (key's name part if name differs).
// A record already there is deleted first: an assignment to an equal key
// need not replace the string the map holds, and the old one may be the
// block of a version of the pod the cache no longer holds.
func (s *records) file(key, name string, p podRecord) {
	ns, kname := splitPodKey(key)
	if name != kname {
		name = kname
	}
	byName := s.pods[ns]
	if byName == nil {
		byName = map[string]podRecord{}
		s.pods[strings.Clone(ns)] = byName
	}
	delete(byName, name)
	byName[name] = p
}

// refresh points the uid of pod key's record at uid, and files the record
// under name: the same values, read from the cached pod now in the
// informer's store. A cached pod's uid and name lie in its one-block
// allocation (compact.PodTransform): a record kept across an update that
// changed nothing it hashes must not keep the strings of the version it was
// published from, which would pin that version's whole block (512 bytes, its
// labels map besides) beside the block the cache holds.
func (s *records) refresh(key, name, uid string) {
	ns, kname := splitPodKey(key)
	if p, ok := s.pods[ns][kname]; ok && p.uid == uid {
		p.uid = uid
		s.file(key, name, p)
	}
}

func (s *records) del(key string) {
	if !isPodKey(key) {
		delete(s.nodes, key)
		return
	}
	ns, name := splitPodKey(key)
	byName, ok := s.pods[ns]
	if !ok {
		return
	}
	delete(byName, name)
	if len(byName) == 0 {
		delete(s.pods, ns)
	}
}

// len counts the records (tests and benchmarks poll it; nothing else reads it).
func (s *records) len() int {
	n := len(s.nodes)
	for _, byName := range s.pods {
		n += len(byName)
	}
	return n
}

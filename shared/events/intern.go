package events

import "strings"

// Interner shares the strings that repeat across objects (namespaces, node
// names, phases, reasons, owners, container names, labels), so that 150,000
// pods hold one copy of each instead of one per pod, and decoding allocates
// less. Not safe for concurrent use: give each decoding goroutine its own.
// The zero value is ready; it forgets everything past maxInterned entries.
type Interner struct {
	m      map[string]string
	owners map[Owner]*Owner
	// A two-way cache in front of each map answers most lookups with one
	// hash and a comparison or two: a hash picks a pair of slots (one
	// cache line), the most recent string first. Direct-mapped, the 5,000
	// node names, 500 owners and 200 namespaces of a rebuild evicted each
	// other from 8,192 slots so often that the map behind answered a large
	// share of the lookups (issue 18).
	cache  [internSlots]string
	ocache [ownerSlots]*Owner
}

const (
	internSlots = 1 << 13
	ownerSlots  = 1 << 10
)

const maxInterned = 1 << 16

// fnv32 is FNV-1a.
func fnv32[T string | []byte](b T) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(b); i++ {
		h = (h ^ uint32(b[i])) * 16777619
	}
	return h
}

// intern returns b as a string, shared with earlier equal strings.
func (in *Interner) intern(b []byte) string {
	if in == nil {
		return string(b)
	}
	pair := (*[2]string)(in.cache[fnv32(b)&(internSlots-2):])
	if pair[0] == string(b) {
		return pair[0]
	}
	if pair[1] == string(b) {
		pair[0], pair[1] = pair[1], pair[0]
		return pair[0]
	}
	s, ok := in.m[string(b)] // no allocation for the lookup
	if !ok {
		if in.m == nil || len(in.m) >= maxInterned {
			in.m = make(map[string]string, 1024)
		}
		s = string(b)
		in.m[s] = s
	}
	pair[0], pair[1] = s, pair[0]
	return s
}

// String returns s, or an earlier string equal to it (the watcher's
// compact transform interns what it keeps of a decoded pod this way). The
// first of equal strings is kept as a copy: s usually lies among the strings
// of a decoded object that is then dropped, and would keep their memory
// spans in use.
func (in *Interner) String(s string) string {
	if in == nil || s == "" {
		return s
	}
	pair := (*[2]string)(in.cache[fnv32(s)&(internSlots-2):])
	if pair[0] == s {
		return pair[0]
	}
	if pair[1] == s {
		pair[0], pair[1] = pair[1], pair[0]
		return pair[0]
	}
	t, ok := in.m[s]
	if !ok {
		if in.m == nil || len(in.m) >= maxInterned {
			in.m = make(map[string]string, 1024)
		}
		t = strings.Clone(s)
		in.m[t] = t
	}
	pair[0], pair[1] = t, pair[0]
	return t
}

// Owner returns a shared *Owner equal to o (the states are read-only).
func (in *Interner) Owner(o Owner) *Owner { return in.owner(o) }

// owner returns a shared *Owner equal to o (the states are read-only).
func (in *Interner) owner(o Owner) *Owner {
	if in == nil {
		p := new(Owner)
		*p = o
		return p
	}
	pair := (*[2]*Owner)(in.ocache[(fnv32(o.Name)^fnv32(o.Kind)*31)&(ownerSlots-2):])
	if p := pair[0]; p != nil && *p == o {
		return p
	}
	if p := pair[1]; p != nil && *p == o {
		pair[0], pair[1] = p, pair[0]
		return p
	}
	p, ok := in.owners[o]
	if !ok {
		if in.owners == nil || len(in.owners) >= maxInterned {
			in.owners = make(map[Owner]*Owner, 256)
		}
		p = new(Owner)
		*p = o
		in.owners[o] = p
	}
	pair[0], pair[1] = p, pair[0]
	return p
}

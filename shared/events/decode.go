package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// A new leader decodes 155,000 KUBE messages before it may act (issue 18:
// the mirror rebuild), and encoding/json was most of that time: it checks the
// whole input, then walks it again through reflection. DecodePod and
// DecodeNode read the two compact states directly, in one pass, and give
// exactly what json.Unmarshal gives: the wire stays plain JSON (auditors read
// KUBE with the nats CLI) and nothing downstream can tell the two apart.
//
// The fast path covers the JSON the watcher writes. Anything else — an
// escaped string, invalid UTF-8, a null, a repeated or case-folded key, a
// number with a fraction or out of range, a value of the wrong type, invalid
// JSON — makes it give up and hand the input to json.Unmarshal, whose result
// (value or error) is then the result. Unknown keys are skipped, as
// json.Unmarshal skips them, so a newer watcher's extra fields stay on the
// fast path. FuzzUnmarshalState compares the two on arbitrary input.

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

// DecodePod decodes data exactly as json.Unmarshal(data, &p) does for a
// zero p. in may be nil.
func DecodePod(data []byte, in *Interner) (*PodState, error) {
	d := decoder{b: data, in: in}
	if p, ok := d.podState(); ok {
		return p, nil
	}
	p := new(PodState)
	return p, json.Unmarshal(data, p)
}

// DecodePodKeyed is DecodePod for a pod kept under key (the mirror's KUBE
// subject): it also gives key back, copied into the pod's own allocation
// when the fast path reads the pod, its name then sharing the key's last
// token when the two are equal. A map from key to pod then holds one object
// per pod instead of two (the string the message arrived with would stay
// alive as the key), which the collector marks on every cycle.
func DecodePodKeyed(data []byte, key string, in *Interner) (*PodState, string, error) {
	d := decoder{b: data, in: in, key: key}
	if p, ok := d.podState(); ok {
		return p, d.key, nil
	}
	p := new(PodState)
	return p, key, json.Unmarshal(data, p)
}

// DecodeNode decodes data exactly as json.Unmarshal(data, &n) does for a
// zero n. in may be nil.
func DecodeNode(data []byte, in *Interner) (*NodeState, error) {
	d := decoder{b: data, in: in}
	n := new(NodeState)
	if d.node(n) && d.end() {
		return n, nil
	}
	*n = NodeState{}
	return n, json.Unmarshal(data, n)
}

// podBlock is a pod, room for two containers (most pods have one or two; a
// pod with more grows its own slice) and room for the pod's own strings
// (ownStrings: uid, name, resourceVersion, and the mirror's key with
// DecodePodKeyed), in one allocation of 512 bytes, a size class of its own.
// The usual pod then costs one object where it cost three (the block, its
// strings, the key the message arrived with: 416 + 64 + 48 bytes at least),
// and own, with no pointers, is at the end where the collector never looks.
// Strings that do not fit are allocated as before (see ownStrings).
type podBlock struct {
	p   PodState
	c   [2]Container
	own [120]byte
}

// podState decodes a pod on the fast path. Its own strings (uid, name,
// resourceVersion, message) share one allocation, and the rest is interned.
func (d *decoder) podState() (*PodState, bool) {
	blk := new(podBlock)
	p := &blk.p
	p.Containers = blk.c[:0:2]
	d.nown = 0
	d.ownBuf = blk.own[:]
	d.name = &p.Name
	if !d.pod(p) || !d.end() {
		return nil, false
	}
	if !d.sawContainers { // "containers": [] stays empty, not nil, as in encoding/json
		p.Containers = nil
	}
	d.ownStrings()
	return p, true
}

// owned is a string of the object's own (not interned), copied once all
// are known, into one allocation.
type owned struct {
	dst *string
	raw []byte
}

func (d *decoder) ownStrings() {
	key := d.key
	// The name shares the key's last token when the two are equal.
	nameInKey := func(raw []byte) bool {
		return len(key) > len(raw) && key[len(key)-len(raw)-1] == '.' && key[len(key)-len(raw):] == string(raw)
	}
	n, nameLen, shared := 0, 0, false
	for _, o := range d.own[:d.nown] {
		n += len(o.raw)
		if o.dst == d.name && nameInKey(o.raw) {
			shared, nameLen = true, len(o.raw)
		}
	}
	buf := d.ownBuf
	switch {
	case key != "" && n+len(key)-nameLen <= len(buf):
		n += len(key) - nameLen
	case n == 0:
		return
	default: // the key stays the string it came as; the rest as DecodePod
		key, shared = "", false
		if n > len(buf) {
			buf = make([]byte, n)
		}
	}
	// buf is never written again: the strings may share it.
	off := 0
	if key != "" {
		copy(buf, key)
		d.key = unsafe.String(&buf[0], len(key))
		off = len(key)
	}
	for _, o := range d.own[:d.nown] {
		switch {
		case shared && o.dst == d.name:
			*o.dst = d.key[len(key)-len(o.raw):]
		case len(o.raw) > 0:
			copy(buf[off:], o.raw)
			*o.dst = unsafe.String(&buf[off], len(o.raw))
			off += len(o.raw)
		}
	}
}

// ownStr reads a string to be copied by ownStrings (the decoder's input
// stays untouched until then).
func (d *decoder) ownStr(dst *string) bool {
	if d.nown == len(d.own) { // a repeated key, which object gives up on anyway
		return false
	}
	s, ok := d.rawString()
	if ok {
		d.own[d.nown] = owned{dst, s}
		d.nown++
	}
	return ok
}

// decoder is one pass over one message. Every method returns false when the
// fast path gives up; the caller then falls back to encoding/json.
type decoder struct {
	b  []byte
	i  int
	in *Interner
	// own collects the pod's own strings (see ownStrings): uid, name,
	// resourceVersion and message at most (a repeated key gives up).
	own  [4]owned
	nown int
	// ownBuf is where ownStrings copies them when they fit (podBlock.own).
	ownBuf []byte
	// key is copied with them (DecodePodKeyed), and name is the pod's
	// Name, which may share the key's last token.
	key           string
	name          *string
	sawContainers bool
}

func (d *decoder) ws() {
	for d.i < len(d.b) && d.b[d.i] <= ' ' {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// end accepts only trailing whitespace.
func (d *decoder) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// peek returns the next non-space byte (0 at the end).
func (d *decoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *decoder) eat(c byte) bool {
	if d.peek() != c {
		return false
	}
	d.i++
	return true
}

// special marks the bytes a string scan must stop at: the closing quote,
// escapes, control bytes and the start of a multi-byte UTF-8 sequence.
var special = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()

// rawString returns the bytes of a string without escapes, control bytes or
// invalid UTF-8 (which encoding/json would rewrite), quotes excluded.
func (d *decoder) rawString() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	start := d.i
	ascii := true
	b := d.b
	for i := d.i; i < len(b); i++ {
		if !special[b[i]] {
			continue
		}
		switch c := b[i]; {
		case c == '"':
			s := b[start:i]
			d.i = i + 1
			if !ascii && !utf8.Valid(s) {
				return nil, false
			}
			return s, true
		case c >= utf8.RuneSelf:
			ascii = false
		default: // an escape or a control byte
			return nil, false
		}
	}
	return nil, false
}

func (d *decoder) str(intern bool) (string, bool) {
	s, ok := d.rawString()
	if !ok {
		return "", false
	}
	if intern {
		return d.in.intern(s), true
	}
	return string(s), true
}

func (d *decoder) boolean() (bool, bool) {
	d.ws()
	switch {
	case bytes.HasPrefix(d.b[d.i:], []byte("true")):
		d.i += 4
		return true, d.delim()
	case bytes.HasPrefix(d.b[d.i:], []byte("false")):
		d.i += 5
		return false, d.delim()
	}
	return false, false
}

// delim reports whether a literal ends here (JSON has no "truex").
func (d *decoder) delim() bool {
	if d.i == len(d.b) {
		return true
	}
	switch d.b[d.i] {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// integer reads an integer literal that fits in bits (no fraction, no
// exponent: encoding/json rejects those for integer fields).
func (d *decoder) integer(bits uint) (int64, bool) {
	d.ws()
	neg := false
	if d.i < len(d.b) && d.b[d.i] == '-' {
		neg = true
		d.i++
	}
	start := d.i
	var u uint64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		if d.i-start >= 18 { // past int64's safe digits: let encoding/json judge
			return 0, false
		}
		u = u*10 + uint64(d.b[d.i]-'0')
		d.i++
	}
	n := d.i - start
	if n == 0 || (n > 1 && d.b[start] == '0') || !d.delim() {
		return 0, false
	}
	v := int64(u)
	if neg {
		v = -v
	}
	lim := int64(1) << (bits - 1)
	if v < -lim || v > lim-1 {
		return 0, false
	}
	return v, true
}

// timestamp reads a time exactly as encoding/json does: the raw literal
// handed to time.Time's UnmarshalJSON.
func (d *decoder) timestamp(t *time.Time) bool {
	d.ws()
	start := d.i
	if _, ok := d.rawString(); !ok {
		return false
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}

func (d *decoder) timePtr() (*time.Time, bool) {
	t := new(time.Time)
	return t, d.timestamp(t)
}

// object reads {"key": value, ...}, calling field for each key; field
// returns false to give up. A repeated key gives up too (encoding/json
// merges into the first value), via seen and the index field returns.
func (d *decoder) object(field func(key []byte) (idx int, ok bool)) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	var seen uint64
	for {
		d.ws()
		key, ok := d.rawString()
		if !ok || !d.eat(':') {
			return false
		}
		idx, ok := field(key)
		if !ok {
			return false
		}
		if idx >= 0 {
			if seen&(1<<idx) != 0 {
				return false
			}
			seen |= 1 << idx
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return true
		default:
			return false
		}
	}
}

// unknown handles a key the type does not have: encoding/json matches keys
// case-insensitively (with Unicode folding), so a key that folds onto a
// known one, or any non-ASCII key, gives up; any other is skipped.
func (d *decoder) unknown(key []byte, known []string) (int, bool) {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return -1, false
		}
	}
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			return -1, false
		}
	}
	return -1, d.skip(0)
}

// skip passes over one valid JSON value of any kind.
func (d *decoder) skip(depth int) bool {
	if depth > 32 {
		return false
	}
	switch d.peek() {
	case '"':
		return d.skipString()
	case '{':
		d.i++
		if d.eat('}') {
			return true
		}
		for {
			d.ws()
			if !d.skipString() || !d.eat(':') || !d.skip(depth+1) {
				return false
			}
			switch d.peek() {
			case ',':
				d.i++
			case '}':
				d.i++
				return true
			default:
				return false
			}
		}
	case '[':
		d.i++
		if d.eat(']') {
			return true
		}
		for {
			if !d.skip(depth + 1) {
				return false
			}
			switch d.peek() {
			case ',':
				d.i++
			case ']':
				d.i++
				return true
			default:
				return false
			}
		}
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		return d.skipNumber()
	}
}

func (d *decoder) literal(s string) bool {
	if !bytes.HasPrefix(d.b[d.i:], []byte(s)) {
		return false
	}
	d.i += len(s)
	return d.delim()
}

// skipString passes over a string with valid escapes (any bytes otherwise:
// encoding/json accepts invalid UTF-8 in a value it ignores).
func (d *decoder) skipString() bool {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return false
	}
	d.i++
	for d.i < len(d.b) {
		c := d.b[d.i]
		d.i++
		switch {
		case c == '"':
			return true
		case c < 0x20:
			return false
		case c == '\\':
			if d.i >= len(d.b) {
				return false
			}
			e := d.b[d.i]
			d.i++
			switch e {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if d.i+4 > len(d.b) {
					return false
				}
				for _, h := range d.b[d.i : d.i+4] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return false
					}
				}
				d.i += 4
			default:
				return false
			}
		}
	}
	return false
}

// skipNumber passes over -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *decoder) skipNumber() bool {
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	start := d.i
	n := digits()
	if n == 0 || (n > 1 && d.b[start] == '0') {
		return false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return d.delim()
}

// stringMap reads {"k": "v", ...} (a non-nil map even when empty, as
// encoding/json makes it). A repeated key keeps the last value, as there.
func (d *decoder) stringMap() (map[string]string, bool) {
	m := map[string]string{}
	ok := d.object(func(key []byte) (int, bool) {
		k := d.in.intern(key)
		v, ok := d.str(true)
		m[k] = v
		return -1, ok
	})
	return m, ok
}

// array reads [v, ...], calling elem for each element.
func (d *decoder) array(elem func() bool) bool {
	if !d.eat('[') {
		return false
	}
	if d.eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return true
		default:
			return false
		}
	}
}

var podKeys = []string{"op", "uid", "namespace", "name", "resourceVersion", "nodeName", "phase", "reason", "message",
	"creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers", "owner", "containers",
	"failedAt", "pvc", "labels", "disruptionReason"}

func (d *decoder) pod(p *PodState) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		var s string
		switch string(key) {
		case "op":
			s, ok = d.str(true)
			p.Op = Op(s)
			return 0, ok
		case "uid":
			return 1, d.ownStr(&p.UID)
		case "namespace":
			p.Namespace, ok = d.str(true)
			return 2, ok
		case "name":
			return 3, d.ownStr(&p.Name)
		case "resourceVersion":
			return 4, d.ownStr(&p.ResourceVersion)
		case "nodeName":
			p.NodeName, ok = d.str(true)
			return 5, ok
		case "phase":
			p.Phase, ok = d.str(true)
			return 6, ok
		case "reason":
			p.Reason, ok = d.str(true)
			return 7, ok
		case "message":
			return 8, d.ownStr(&p.Message)
		case "creationTimestamp":
			return 9, d.timestamp(&p.CreationTimestamp)
		case "deletionTimestamp":
			p.DeletionTimestamp, ok = d.timePtr()
			return 10, ok
		case "deletionGracePeriodSeconds":
			v, ok := d.integer(64)
			p.DeletionGracePeriodSeconds = &v
			return 11, ok
		case "finalizers":
			v, ok := d.integer(strconv.IntSize)
			p.Finalizers = int(v)
			return 12, ok
		case "owner":
			var o Owner
			if !d.owner(&o) {
				return 13, false
			}
			p.Owner = d.in.owner(o)
			return 13, true
		case "containers":
			d.sawContainers = true
			return 14, d.array(func() bool {
				p.Containers = append(p.Containers, Container{})
				return d.container(&p.Containers[len(p.Containers)-1])
			})
		case "failedAt":
			p.FailedAt, ok = d.timePtr()
			return 15, ok
		case "pvc":
			p.PVC, ok = d.boolean()
			return 16, ok
		case "labels":
			p.Labels, ok = d.stringMap()
			return 17, ok
		case "disruptionReason":
			p.DisruptionReason, ok = d.str(true)
			return 18, ok
		}
		return d.unknown(key, podKeys)
	})
}

var ownerKeys = []string{"kind", "name"}

func (d *decoder) owner(o *Owner) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		switch string(key) {
		case "kind":
			o.Kind, ok = d.str(true)
			return 0, ok
		case "name":
			o.Name, ok = d.str(true)
			return 1, ok
		}
		return d.unknown(key, ownerKeys)
	})
}

var containerKeys = []string{"name", "kind", "restarts", "lastReason", "lastExitCode", "lastFinished"}

func (d *decoder) container(c *Container) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		var v int64
		switch string(key) {
		case "name":
			c.Name, ok = d.str(true)
			return 0, ok
		case "kind":
			c.Kind, ok = d.str(true)
			return 1, ok
		case "restarts":
			v, ok = d.integer(32)
			c.Restarts = int32(v)
			return 2, ok
		case "lastReason":
			c.LastReason, ok = d.str(true)
			return 3, ok
		case "lastExitCode":
			v, ok = d.integer(32)
			c.LastExitCode = int32(v)
			return 4, ok
		case "lastFinished":
			c.LastFinished, ok = d.timePtr()
			return 5, ok
		}
		return d.unknown(key, containerKeys)
	})
}

var nodeKeys = []string{"op", "uid", "name", "resourceVersion", "labels", "annotations", "unschedulable", "taints",
	"ready", "readySince", "allocatablePods", "ephemeralStorageBytes", "pods", "evicting", "podsResourceVersion",
	"imageBytes", "imageCount", "imagesTruncated", "departed", "departedEvicted",
	"departedUnknown", "evictionStreak"}

func (d *decoder) node(n *NodeState) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		var s string
		var v int64
		switch string(key) {
		case "op":
			s, ok = d.str(true)
			n.Op = Op(s)
			return 0, ok
		case "uid":
			n.UID, ok = d.str(false)
			return 1, ok
		case "name":
			n.Name, ok = d.str(true) // pods name their node: one copy for all
			return 2, ok
		case "resourceVersion":
			n.ResourceVersion, ok = d.str(false)
			return 3, ok
		case "labels":
			n.Labels, ok = d.stringMap()
			return 4, ok
		case "annotations":
			n.Annotations, ok = d.stringMap()
			return 5, ok
		case "unschedulable":
			n.Unschedulable, ok = d.boolean()
			return 6, ok
		case "taints":
			n.Taints = []Taint{}
			return 7, d.array(func() bool {
				n.Taints = append(n.Taints, Taint{})
				return d.taint(&n.Taints[len(n.Taints)-1])
			})
		case "ready":
			n.Ready, ok = d.str(true)
			return 8, ok
		case "readySince":
			n.ReadySince, ok = d.timePtr()
			return 9, ok
		case "allocatablePods":
			n.AllocatablePods, ok = d.integer(64)
			return 10, ok
		case "ephemeralStorageBytes":
			n.EphemeralBytes, ok = d.integer(64)
			return 11, ok
		case "pods":
			v, ok = d.integer(strconv.IntSize)
			n.Pods = int(v)
			return 12, ok
		case "evicting":
			v, ok = d.integer(strconv.IntSize)
			n.Evicting = int(v)
			return 13, ok
		case "podsResourceVersion":
			n.PodsResourceVersion, ok = d.str(false)
			return 14, ok
		case "imageBytes":
			n.ImageBytes, ok = d.integer(64)
			return 15, ok
		case "imageCount":
			v, ok = d.integer(strconv.IntSize)
			n.ImageCount = int(v)
			return 16, ok
		case "imagesTruncated":
			n.ImagesTruncated, ok = d.boolean()
			return 17, ok
		case "departed":
			v, ok = d.integer(strconv.IntSize)
			n.Departed = int(v)
			return 18, ok
		case "departedEvicted":
			v, ok = d.integer(strconv.IntSize)
			n.DepartedEvicted = int(v)
			return 19, ok
		case "departedUnknown":
			v, ok = d.integer(strconv.IntSize)
			n.DepartedUnknown = int(v)
			return 20, ok
		case "evictionStreak":
			v, ok = d.integer(strconv.IntSize)
			n.EvictionStreak = int(v)
			return 21, ok
		}
		return d.unknown(key, nodeKeys)
	})
}

var taintKeys = []string{"key", "value", "effect"}

func (d *decoder) taint(t *Taint) bool {
	return d.object(func(key []byte) (int, bool) {
		var ok bool
		switch string(key) {
		case "key":
			t.Key, ok = d.str(true)
			return 0, ok
		case "value":
			t.Value, ok = d.str(true)
			return 1, ok
		case "effect":
			t.Effect, ok = d.str(true)
			return 2, ok
		}
		return d.unknown(key, taintKeys)
	})
}

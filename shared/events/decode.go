package events

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/opswire/opswire/shared/internal/rfc3339"
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

// more reads what follows a member or an element: a comma (more to come)
// or the closing byte (the end, ok); anything else is not ok.
func (d *decoder) more(closing byte) (more, ok bool) {
	switch d.peek() {
	case ',':
		d.i++
		return true, true
	case closing:
		d.i++
		return false, true
	}
	return false, false
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
	for i := d.i; ; i++ {
		if i = nextSpecial(b, i); i == len(b) {
			return nil, false
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
}

// nextSpecial returns the index of the first byte at or after i that special
// marks, or len(b). Strings are most of a state's bytes, so it looks at eight
// at a time: a byte is flagged when it is '"' or '\\' (equal: zero after the
// xor), below 0x20, or has its high bit set. A borrow only carries upwards,
// into bytes after a flagged one, so the lowest flag is always a true one.
func nextSpecial(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		q, e := w^(ones*'"'), w^(ones*'\\')
		if m := ((q-ones)&^q | (e-ones)&^e | (w-ones*0x20)&^w | w) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for i < len(b) && !special[b[i]] {
		i++
	}
	return i
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

// timestamp reads a time exactly as encoding/json does (the raw literal
// handed to time.Time's UnmarshalJSON): opswire's UTC form through
// rfc3339.ParseUTC, which gives the same time, anything else through
// UnmarshalJSON itself.
func (d *decoder) timestamp(t *time.Time) bool {
	d.ws()
	start := d.i
	s, ok := d.rawString()
	if !ok {
		return false
	}
	if *t, ok = rfc3339.ParseUTC(s); ok {
		return true
	}
	return t.UnmarshalJSON(d.b[start:d.i]) == nil
}

func (d *decoder) timePtr() (*time.Time, bool) {
	t := new(time.Time)
	return t, d.timestamp(t)
}

// fields are the keys of one of the states, in the order the watcher's
// encoding/json writes them (TestFieldsInWireOrder).
type fields struct {
	names  []string
	quoted []string // `"name":`, the key as it appears on the wire
}

func newFields(names ...string) *fields {
	f := &fields{names: names}
	for _, n := range names {
		f.quoted = append(f.quoted, `"`+n+`":`)
	}
	return f
}

// index returns the index of key, or -1.
func (f *fields) index(key []byte) int {
	for i, n := range f.names {
		if n == string(key) {
			return i
		}
	}
	return -1
}

// object reads {"key": value, ...} into one of the states, calling field
// with the index of each known key; field returns false to give up. A
// repeated key gives up too (encoding/json merges into the first value).
//
// The keys come in the order f lists them, some left out, so the next key is
// first looked for as the bytes `"key":` among those after the last one
// read: one short comparison or two per key instead of scanning it as a
// string and matching it against every name (issue 18: a pod has about 20
// keys, and this was a third of its decoding). Any other key (out of order,
// spaced, escaped, unknown) is read the long way.
func (d *decoder) object(f *fields, field func(idx int) bool) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	var seen uint64
	next := 0
	for {
		d.ws()
		idx := -1
		if rest := d.b[d.i:]; len(rest) > 1 {
			for j := next; j < len(f.quoted); j++ {
				if q := f.quoted[j]; rest[1] == q[1] && len(rest) >= len(q) && string(rest[:len(q)]) == q {
					idx = j
					d.i += len(q)
					break
				}
			}
		}
		if idx < 0 {
			key, ok := d.rawString()
			if !ok || !d.eat(':') {
				return false
			}
			if idx = f.index(key); idx < 0 {
				if !d.unknown(key, f.names) {
					return false
				}
			}
		}
		if idx >= 0 {
			if seen&(1<<idx) != 0 || !field(idx) {
				return false
			}
			seen |= 1 << idx
			next = idx + 1
		}
		if more, ok := d.more('}'); !more {
			return ok
		}
	}
}

// members reads {"key": value, ...} of any keys (a map), calling member for
// each; member returns false to give up.
func (d *decoder) members(member func(key []byte) bool) bool {
	if !d.eat('{') {
		return false
	}
	if d.eat('}') {
		return true
	}
	for {
		d.ws()
		key, ok := d.rawString()
		if !ok || !d.eat(':') || !member(key) {
			return false
		}
		if more, ok := d.more('}'); !more {
			return ok
		}
	}
}

// unknown handles a key the type does not have: encoding/json matches keys
// case-insensitively (with Unicode folding), so a key that folds onto a
// known one, or any non-ASCII key, gives up; any other is skipped.
func (d *decoder) unknown(key []byte, known []string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			return false
		}
	}
	return d.skip(0)
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
	ok := d.members(func(key []byte) bool {
		k := d.in.intern(key)
		v, ok := d.str(true)
		m[k] = v
		return ok
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
		if more, ok := d.more(']'); !more {
			return ok
		}
	}
}

package dispatch

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// StreamSourceHeader is the header a stream writes on every message it
// sources (and removes from what it receives): "<stream> <seq> <filter>
// <transform> <subject> [<identity>]", naming the source it came through.
const StreamSourceHeader = "Nats-Stream-Source"

// ForeignSource reports whether a sourced message's subject is outside the
// filter of the source it came through, and returns that filter. The hub's
// server writes the header itself, but takes the subject from the sending
// side: a cluster's edge (or its leaf credentials) can hand the hub a
// message under another cluster's subject inside its own source, which the
// hub stores without checking the filter (docs/fleet.md#trust). A message
// without the header (published to the stream directly) or with a header of
// an older form (no filter) is not judged here.
func ForeignSource(subj string, h nats.Header) (string, bool) {
	v := h.Get(StreamSourceHeader)
	if v == "" {
		return "", false
	}
	f := strings.Fields(v)
	if len(f) < 5 {
		return "", false
	}
	filter := f[2]
	if filter == "" || filter == ">" {
		return filter, false
	}
	return filter, !subjectMatches(filter, subj)
}

// subjectMatches is NATS subject matching of a literal subject against a
// filter with '*' and a trailing '>'.
func subjectMatches(filter, subj string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subj, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

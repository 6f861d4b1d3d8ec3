package dispatch

import (
	"strings"

	"github.com/nats-io/nats.go"
)

// StreamSourceHeader is the header a stream writes on every message it
// sources: "<stream> <seq> <filter> <transform> <subject> [<identity>]",
// naming the source it came through.
const StreamSourceHeader = "Nats-Stream-Source"

// ForeignSource reports whether a sourced message's subject is outside the
// filter of the source it came through, and returns that filter. The hub's
// server writes the header itself, but takes the subject from the sending
// side: a cluster's edge (or its leaf credentials) can hand the hub a
// message under another cluster's subject inside its own source, which the
// hub stores without checking the filter (docs/fleet.md#trust). A message
// without the header (published to the stream directly) or with a header of
// an older form (no filter) is not judged here.
//
// Every value is judged, under any case of the key, and more than one is
// foreign: the hub removes a received header only where its key follows
// "\r\n", while nats.go also splits header lines on a bare "\n", so the
// sending side can put a value of its own, claiming another cluster's
// filter, beside (and before) the one the hub writes.
func ForeignSource(subj string, h nats.Header) (string, bool) {
	vs := StreamSources(h)
	switch len(vs) {
	case 0:
		return "", false
	case 1:
	default:
		filters := make([]string, len(vs))
		for i, v := range vs {
			filters[i] = sourceFilter(v)
		}
		return strings.Join(filters, ", "), true
	}
	filter := sourceFilter(vs[0])
	if filter == "" || filter == ">" {
		return filter, false
	}
	return filter, !subjectMatches(filter, subj)
}

// StreamSources returns every Nats-Stream-Source value of h, whatever the
// case of its key (nats.go keeps keys as sent).
func StreamSources(h nats.Header) []string {
	var out []string
	for k, vs := range h {
		if strings.EqualFold(k, StreamSourceHeader) {
			out = append(out, vs...)
		}
	}
	return out
}

// sourceFilter is the filter field of a Nats-Stream-Source value, or "" for
// a value of an older form.
func sourceFilter(v string) string {
	f := strings.Fields(v)
	if len(f) < 5 {
		return ""
	}
	return f[2]
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

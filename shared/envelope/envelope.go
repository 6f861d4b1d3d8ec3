// Package envelope writes and reads CloudEvents 1.0 in binary mode over NATS
// headers (DESIGN §4). It is a few lines of our own instead of the SDK: the
// mapping is fixed, and every message must carry a Nats-Msg-Id equal to ce-id
// so that JetStream deduplicates retries and duplicate publishers (natsx.PublishEvent
// sets a fallback Nats-Msg-Id when a foreign message holds the ce-id's).
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/internal/rfc3339"
)

// Header names of the CloudEvents NATS binding and JetStream.
const (
	HeaderSpecVersion = "ce-specversion"
	HeaderID          = "ce-id"
	HeaderSource      = "ce-source"
	HeaderType        = "ce-type"
	HeaderTime        = "ce-time"
	HeaderSubject     = "ce-subject"
	HeaderContentType = "content-type"
	HeaderMsgID       = "Nats-Msg-Id"
	HeaderTTL         = "Nats-TTL"

	SpecVersion = "1.0"
	ContentJSON = "application/json"
)

// Event is the envelope of one message; Data is the typed payload.
type Event struct {
	ID      string
	Source  string // opswire/<cluster>/<service>
	Type    string // e.g. io.opswire.kube.pod.v1
	Time    time.Time
	Subject string // the object, e.g. <ns>/<pod>
	Data    []byte
}

// Source returns the ce-source of a service in a cluster.
func Source(cluster, service string) string { return "opswire/" + cluster + "/" + service }

// New builds an event with a JSON payload (see Marshal).
func New(id, source, typ, subject string, payload any, now time.Time) (Event, error) {
	data, err := Marshal(payload)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s payload: %w", typ, err)
	}
	return Event{ID: id, Source: source, Type: typ, Time: now, Subject: subject, Data: data}, nil
}

// Marshal encodes a payload as json.Marshal does but without HTML escaping,
// so an auditor reading `nats sub 'ops.>'` sees "pods >= maxPods" rather
// than "pods \u003e= maxPods". The output is as deterministic as
// json.Marshal's (same bytes for the same value); nothing here is embedded
// in HTML.
//
// It encodes into a pooled scratch buffer and returns an exact-size copy: one
// allocation per payload instead of a buffer regrown several times (the
// watcher encodes every pod change, 1,000 a second under churn).
func Marshal(v any) ([]byte, error) {
	s := scratchPool.Get().(*scratch)
	defer s.put()
	if err := s.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(s.buf.Bytes(), []byte("\n"))), nil
}

// scratch is a reusable encoder and its output buffer.
type scratch struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var scratchPool = sync.Pool{New: func() any {
	s := &scratch{}
	s.enc = json.NewEncoder(&s.buf)
	s.enc.SetEscapeHTML(false)
	return s
}}

// scratchKeep bounds the buffer a pooled scratch keeps (a rare huge payload
// is not held by the pool).
const scratchKeep = 64 << 10

func (s *scratch) put() {
	if s.buf.Cap() > scratchKeep {
		return
	}
	s.buf.Reset()
	scratchPool.Put(s)
}

// Msg renders the event as a NATS message on the given subject.
// The header's values share one backing array (as Header.Set would store
// them, one value per key), so a message costs one allocation for them, not
// one per header.
func (e Event) Msg(natsSubject string) *nats.Msg {
	vals := [...]string{SpecVersion, e.ID, e.ID, e.Source, e.Type, e.Time.UTC().Format(time.RFC3339Nano), ContentJSON, e.Subject}
	keys := [...]string{HeaderSpecVersion, HeaderID, HeaderMsgID, HeaderSource, HeaderType, HeaderTime, HeaderContentType, HeaderSubject}
	n := len(keys)
	if e.Subject == "" {
		n--
	}
	v := vals[:n:n]
	h := make(nats.Header, len(keys)) // up to 8 keys fit the smallest map
	for i := range n {
		h[keys[i]] = v[i : i+1 : i+1]
	}
	return &nats.Msg{Subject: natsSubject, Header: h, Data: e.Data}
}

// ErrMalformed marks a message that is not a valid opswire CloudEvent. Consumers
// log, count and terminate such messages; retrying cannot fix them.
var ErrMalformed = errors.New("malformed event")

// Parse reads the envelope from NATS headers and body.
func Parse(h nats.Header, data []byte) (Event, error) {
	if h == nil {
		return Event{}, fmt.Errorf("%w: no headers", ErrMalformed)
	}
	if v := h.Get(HeaderSpecVersion); v != SpecVersion {
		return Event{}, fmt.Errorf("%w: ce-specversion %q, want %q", ErrMalformed, v, SpecVersion)
	}
	e := Event{
		ID:      h.Get(HeaderID),
		Source:  h.Get(HeaderSource),
		Type:    h.Get(HeaderType),
		Subject: h.Get(HeaderSubject),
		Data:    data,
	}
	if e.ID == "" || e.Source == "" || e.Type == "" {
		return Event{}, fmt.Errorf("%w: ce-id, ce-source and ce-type are required", ErrMalformed)
	}
	if ts := h.Get(HeaderTime); ts != "" {
		t, ok := rfc3339.ParseUTC(ts) // what opswire writes; anything else the general way
		if !ok {
			var err error
			if t, err = time.Parse(time.RFC3339Nano, ts); err != nil {
				return Event{}, fmt.Errorf("%w: ce-time: %v", ErrMalformed, err)
			}
		}
		e.Time = t
	}
	return e, nil
}

// Decode parses the envelope, checks its type and decodes the payload into out.
func Decode(h nats.Header, data []byte, wantType string, out any) (Event, error) {
	return DecodeFunc(h, data, wantType, func(data []byte) error { return json.Unmarshal(data, out) })
}

// DecodeFunc is Decode with a payload decoder of the caller's (the KUBE
// mirror's decoders made for the compact states, say).
func DecodeFunc(h nats.Header, data []byte, wantType string, unmarshal func([]byte) error) (Event, error) {
	e, err := Parse(h, data)
	if err != nil {
		return e, err
	}
	if e.Type != wantType {
		return e, fmt.Errorf("%w: ce-type %q, want %q", ErrMalformed, e.Type, wantType)
	}
	if err := unmarshal(data); err != nil {
		return e, fmt.Errorf("%w: %s payload: %v", ErrMalformed, wantType, err)
	}
	return e, nil
}

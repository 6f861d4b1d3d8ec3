package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// Kind is the family of an OPS event; events of one kind share a card layout,
// so groups are formed per route and kind.
type Kind string

// Kinds of OPS events.
const (
	KindCordon   Kind = "cordon"
	KindCleanup  Kind = "cleanup"
	KindRestarts Kind = "restarts"
	KindImages   Kind = "images"
	// KindIntent is an actor's write-ahead intent
	// (ops.<cluster>.<actor>.intent.>): a record for the actor's next
	// leader, not a decision. It is never routed, grouped or sent.
	KindIntent Kind = "intent"
)

// Item is one decoded OPS message.
type Item struct {
	ID      string // ce-id, the decision's idempotent id
	Subject string // NATS subject it was stored under
	// Cluster is the <cluster> token of Subject (ops.<cluster>.…), as
	// stored: the cluster the decision was made in.
	Cluster   string
	Type      string // ce-type
	Source    string
	Kind      Kind
	Severity  events.Severity
	Namespace string // cleanup only
	Time      time.Time
	Data      json.RawMessage

	Cordon  *events.CordonDecision
	Cleanup *events.CleanupDecision
	Report  *events.RestartReport
	Image   *events.ImageAlert
}

// Decode reads an OPS message. Every error wraps envelope.ErrMalformed: such
// a message can never be delivered, so the caller terminates it.
func Decode(subj string, h nats.Header, data []byte) (*Item, error) {
	ev, err := envelope.Parse(h, data)
	if err != nil {
		return nil, err
	}
	it := &Item{ID: ev.ID, Subject: subj, Cluster: ClusterToken(subj), Type: ev.Type, Source: ev.Source, Time: ev.Time, Data: data}
	var payload any
	switch ev.Type {
	case events.TypeCordon:
		it.Kind, it.Cordon = KindCordon, &events.CordonDecision{}
		payload = it.Cordon
	case events.TypeCleanup:
		it.Kind, it.Cleanup = KindCleanup, &events.CleanupDecision{}
		payload = it.Cleanup
	case events.TypeRestartReport:
		it.Kind, it.Report = KindRestarts, &events.RestartReport{}
		payload = it.Report
	case events.TypeImageAlert:
		it.Kind, it.Image = KindImages, &events.ImageAlert{}
		payload = it.Image
	case events.TypeIntent:
		it.Kind = KindIntent
		return it, nil
	default:
		return nil, fmt.Errorf("%w: unknown ce-type %q", envelope.ErrMalformed, ev.Type)
	}
	if err := json.Unmarshal(data, payload); err != nil {
		return nil, fmt.Errorf("%w: %s payload: %v", envelope.ErrMalformed, ev.Type, err)
	}
	switch {
	case it.Cordon != nil:
		it.Severity = it.Cordon.Severity
		it.Time = pick(it.Cordon.Time, it.Time)
	case it.Cleanup != nil:
		it.Severity, it.Namespace = it.Cleanup.Severity, it.Cleanup.Namespace
		it.Time = pick(it.Cleanup.Time, it.Time)
	case it.Report != nil:
		it.Severity = it.Report.Severity
		it.Time = pick(it.Report.Tick, it.Time)
	case it.Image != nil:
		it.Severity = it.Image.Severity
		it.Time = pick(it.Image.Time, it.Time)
	}
	if it.Severity == "" {
		it.Severity = events.SeverityInfo
	}
	return it, nil
}

// ClusterToken returns the <cluster> token of an ops.<cluster>.… subject,
// "" for any other subject.
func ClusterToken(subj string) string {
	rest, ok := strings.CutPrefix(subj, "ops.")
	if !ok {
		return ""
	}
	tok, _, _ := strings.Cut(rest, ".")
	return tok
}

func pick(payload, envelope time.Time) time.Time {
	if !payload.IsZero() {
		return payload
	}
	return envelope
}

// SeverityRank orders severities for sorting and for a group's colour.
func SeverityRank(s events.Severity) int {
	switch s {
	case events.SeverityCritical:
		return 2
	case events.SeverityWarning:
		return 1
	}
	return 0
}

package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
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
	if err := checkOrigin(subj, ev); err != nil {
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

// kindActor is the actor that alone publishes each kind of decision.
var kindActor = map[string]string{
	events.TypeCordon:        "cordon",
	events.TypeCleanup:       "cleanup",
	events.TypeRestartReport: "report",
	events.TypeImageAlert:    "report",
}

// checkOrigin refuses an event that claims to be another actor's than the
// one whose subject it was stored under (docs/security.md): every actor may
// publish only its own ops.<cluster>.<actor>.> subjects, and its ids start
// with "<actor>/" and its ce-source is opswire/<cluster>/<actor>, so an event
// whose ce-id, ce-source or ce-type names another actor was forged by the
// subject's actor (say, one holding another's deterministic id to suppress
// the real record, or dressing up as it).
func checkOrigin(subj string, ev envelope.Event) error {
	rest, ok := strings.CutPrefix(subj, "ops.")
	parts := strings.SplitN(rest, ".", 3)
	if !ok || len(parts) < 2 || parts[0] == "" || parts[1] == "" {
		return fmt.Errorf("%w: subject %q is not ops.<cluster>.<actor>.…", envelope.ErrMalformed, subj)
	}
	cluster, actor := parts[0], parts[1]
	if idActor, _, _ := strings.Cut(ev.ID, "/"); idActor != actor {
		return fmt.Errorf("%w: ce-id %q is not an id of %s, whose subject it is on", envelope.ErrMalformed, ev.ID, actor)
	}
	// The actor is what follows the last '/': a cluster name may hold '/'
	// (an EKS ARN), an actor never does.
	src, ok := strings.CutPrefix(ev.Source, "opswire/")
	i := strings.LastIndex(src, "/")
	if !ok || i < 0 || subject.Encode(src[:i]) != cluster || src[i+1:] != actor {
		return fmt.Errorf("%w: ce-source %q is not opswire/<cluster>/%s of subject %s", envelope.ErrMalformed, ev.Source, actor, subj)
	}
	if want, ok := kindActor[ev.Type]; ok && want != actor {
		return fmt.Errorf("%w: ce-type %s is published by %s, not %s", envelope.ErrMalformed, ev.Type, want, actor)
	}
	return nil
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

package events

import (
	"encoding/json"
	"time"
)

// CloudEvents types of the OPS stream.
const (
	TypeCordon        = "io.opswire.ops.cordon.v1"
	TypeCleanup       = "io.opswire.ops.cleanup.v1"
	TypeRestartReport = "io.opswire.ops.report.restarts.v1"
	TypeImageAlert    = "io.opswire.ops.report.images.v1"
	// TypeIntent is a write-ahead record an actor stores before a write
	// (ops.<cluster>.<actor>.intent.<object>): not a decision, never a card.
	TypeIntent = "io.opswire.ops.intent.v1"
)

// Intent is published on ops.<cluster>.<actor>.intent.<object tokens> before
// a write. It carries the outcome audit message the write will produce, so a
// new leader can publish it (same id) when the old leader died between the
// write and that audit.
type Intent struct {
	Actor     string    `json:"actor"`  // e.g. cleanup
	Action    string    `json:"action"` // the outcome verb, e.g. deleted
	Kind      string    `json:"kind"`   // e.g. Pod
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Time      time.Time `json:"time"`
	// Outcome is the audit message the write produces, as it will be stored.
	Outcome IntentOutcome `json:"outcome"`
	// Answered is set on an intent's answer record only (actuate.NewAnswer):
	// the attempt's writes were answered and none of them can still commit
	// (refused, conflicted, throttled; why, e.g. "refused"). A new leader
	// then need not wait for a late commit of this attempt.
	Answered string `json:"answered,omitempty"`
}

// IntentOutcome is an audit message carried inside an Intent.
type IntentOutcome struct {
	Subject string          `json:"subject"` // NATS subject
	ID      string          `json:"id"`      // ce-id and Nats-Msg-Id
	Source  string          `json:"source"`
	Type    string          `json:"type"`
	Object  string          `json:"object,omitempty"` // ce-subject
	Time    time.Time       `json:"time"`
	Data    json.RawMessage `json:"data"`
}

// Severity of an OPS event; the notifier routes and colours cards by it.
type Severity string

const (
	SeverityInfo     Severity = "info"
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

// CordonDecision is published on ops.<cluster>.cordon.<verb>.<node>.
type CordonDecision struct {
	Verb     string    `json:"verb"`             // cordoned, uncordoned, handedover, skipped, dryrun, failed
	Action   string    `json:"action,omitempty"` // cordon, uncordon or handover, what was wanted
	Mode     string    `json:"mode,omitempty"`   // cordon or taint
	Node     string    `json:"node"`
	NodeUID  string    `json:"nodeUID,omitempty"`
	Pods     int       `json:"pods"`
	MaxPods  int       `json:"maxPods"`
	MinPods  int       `json:"minPods"`
	Reason   string    `json:"reason"`
	Severity Severity  `json:"severity"`
	DryRun   bool      `json:"dryRun,omitempty"`
	Error    string    `json:"error,omitempty"`
	Time     time.Time `json:"time"`
	// Code is the machine-readable reason (e.g. max-reached, min-reached,
	// cap-reached); ResourceVersion is the node version decided on.
	Code            string `json:"code,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// Held, Cap and Managed explain a blast-radius refusal: nodes opswire
	// holds, the cap in force, and the managed nodes a percentage cap is of.
	Held    int `json:"held,omitempty"`
	Cap     int `json:"cap,omitempty"`
	Managed int `json:"managed,omitempty"`
	// Replica is the identity of the leader that decided.
	Replica string `json:"replica,omitempty"`
}

// CleanupDecision is published on ops.<cluster>.cleanup.<verb>.<ns>.<pod>.
type CleanupDecision struct {
	Verb       string    `json:"verb"`             // deleted, forcedeleted, deletionrequested, skipped, dryrun, failed
	Action     string    `json:"action,omitempty"` // delete or forcedelete, what was wanted
	Namespace  string    `json:"namespace"`
	Pod        string    `json:"pod"`
	PodUID     string    `json:"podUID,omitempty"`
	Node       string    `json:"node,omitempty"`
	Owner      *Owner    `json:"owner,omitempty"`
	Phase      string    `json:"phase,omitempty"`
	PodReason  string    `json:"podReason,omitempty"` // e.g. Evicted
	Reason     string    `json:"reason"`              // why this decision
	Message    string    `json:"message,omitempty"`   // the reason in words
	AgeSeconds int64     `json:"ageSeconds"`
	Severity   Severity  `json:"severity"`
	DryRun     bool      `json:"dryRun,omitempty"`
	Error      string    `json:"error,omitempty"`
	Time       time.Time `json:"time"`
}

// RestartRow is one line of a restart report.
type RestartRow struct {
	Namespace  string      `json:"namespace"`
	Owner      *Owner      `json:"owner,omitempty"`
	Pod        string      `json:"pod,omitempty"`  // empty when grouped by workload
	Pods       int         `json:"pods,omitempty"` // pods in the row when grouped
	Node       string      `json:"node,omitempty"`
	Restarts   int64       `json:"restarts"`
	Containers []Container `json:"containers,omitempty"`
}

// RestartReport is published once per tick on ops.<cluster>.report.restarts.
type RestartReport struct {
	ID        string       `json:"id"`
	Title     string       `json:"title,omitempty"`
	Tick      time.Time    `json:"tick"`
	Mode      string       `json:"mode"`    // total or increase
	GroupBy   string       `json:"groupBy"` // pod or workload
	Threshold int64        `json:"threshold"`
	PodsSeen  int          `json:"podsSeen"`
	Offenders int          `json:"offenders"` // rows before the top limit
	Restarts  int64        `json:"restarts"`  // sum over all offending rows
	Rows      []RestartRow `json:"rows"`
	Truncated int          `json:"truncated,omitempty"` // rows left out by top
	Severity  Severity     `json:"severity"`
	// OnDemand marks a report run by a ctl request rather than by the schedule.
	OnDemand bool `json:"onDemand,omitempty"`
	// Since is the time of the baseline an increase report counts from
	// (absent when no baseline existed: counts are then since pod start).
	Since *time.Time `json:"since,omitempty"`
	// OffendingPods counts pods over the threshold (differs from Offenders
	// when rows are grouped by workload).
	OffendingPods int `json:"offendingPods"`
	// Reasons counts offending containers by their last termination reason
	// (e.g. OOMKilled, Error).
	Reasons map[string]int `json:"reasons,omitempty"`
}

// ImageAlert is published on ops.<cluster>.report.images.<node>.
type ImageAlert struct {
	Node            string    `json:"node"`
	Reason          string    `json:"reason"` // maxBytes, maxPercent, growth, truncated
	ImageBytes      int64     `json:"imageBytes"`
	ImageCount      int       `json:"imageCount"`
	CapacityBytes   int64     `json:"capacityBytes,omitempty"`
	Percent         float64   `json:"percent,omitempty"`
	PreviousBytes   int64     `json:"previousBytes,omitempty"`
	ImagesTruncated bool      `json:"imagesTruncated,omitempty"`
	Severity        Severity  `json:"severity"`
	Time            time.Time `json:"time"`
	// Title, NodeUID and the thresholds in force, so a receiver can render
	// the alert without the configuration.
	Title       string  `json:"title,omitempty"`
	NodeUID     string  `json:"nodeUID,omitempty"`
	MaxBytes    int64   `json:"maxBytes,omitempty"`
	MaxPercent  float64 `json:"maxPercent,omitempty"`
	GrowthBytes int64   `json:"growthBytes,omitempty"`
	// Note explains a figure that is only a lower bound ("at least 46.6 GiB:
	// the kubelet lists only its 50 largest images ...") when ImagesTruncated.
	Note string `json:"note,omitempty"`
}

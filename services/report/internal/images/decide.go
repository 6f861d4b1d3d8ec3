// Package images decides the node image-storage alerts of seed 003: the bytes
// taken by container images on a node (sum of status.images[].sizeBytes)
// against an absolute and a relative threshold, with growth re-alerts and a
// per-node cooldown.
//
// Decide is pure: the node's snapshot, what was last alerted for the node, the
// thresholds and the time go in; the decision and the new memory come out.
// Being level-triggered, it gives the same answer whichever snapshot delivered
// the change, and a new leader that loads the memory from KV decides exactly
// as the old one would have.
package images

import (
	"time"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// Alert reasons (also the metric label).
const (
	ReasonMaxBytes   = "maxBytes"
	ReasonMaxPercent = "maxPercent"
	ReasonGrowth     = "growth"
)

// Thresholds are the imageAlert settings.
type Thresholds struct {
	MaxBytes    int64   // 0 disables
	MaxPercent  float64 // of ephemeral-storage capacity; 0 disables
	GrowthBytes int64
	Cooldown    time.Duration
}

// ThresholdsFrom reads the thresholds from the configuration section.
func ThresholdsFrom(c config.ImageAlert) Thresholds {
	return Thresholds{MaxBytes: c.MaxBytes, MaxPercent: c.MaxPercent, GrowthBytes: c.GrowthBytes, Cooldown: c.Cooldown.Duration}
}

// Memory is what is remembered of one node between decisions.
type Memory struct {
	// AlertedAt and AlertedBytes describe the last alert sent for the node.
	AlertedAt    time.Time `json:"alertedAt"`
	AlertedBytes int64     `json:"alertedBytes"`
	// Active is true while the node stays over a threshold after an alert;
	// growth is then measured from AlertedBytes. Dropping under the
	// thresholds clears it, so the next crossing alerts again.
	Active bool `json:"active"`
}

// Decision is the outcome for one node snapshot.
type Decision struct {
	// Reason is set when an alert must be sent now.
	Reason string
	// Percent of capacity used by images (0 when the capacity is unknown).
	Percent float64
	// Memory is the node's memory after this decision; Changed says it
	// differs from the one given (and must be stored).
	Memory  Memory
	Changed bool
	// RecheckAfter > 0: an alert is due but held back by the cooldown; decide
	// again after this long even if the node does not change.
	RecheckAfter time.Duration
}

// Decide applies the thresholds to one node.
func Decide(n *events.NodeState, mem Memory, t Thresholds, now time.Time) Decision {
	d := Decision{Memory: mem}
	if n.EphemeralBytes > 0 {
		d.Percent = float64(n.ImageBytes) * 100 / float64(n.EphemeralBytes)
	}
	overBytes := t.MaxBytes > 0 && n.ImageBytes > t.MaxBytes
	overPercent := t.MaxPercent > 0 && n.EphemeralBytes > 0 && d.Percent > t.MaxPercent
	if !overBytes && !overPercent {
		if mem.Active {
			d.Memory.Active = false
			d.Changed = true
		}
		return d
	}
	reason := ReasonMaxPercent
	if overBytes {
		reason = ReasonMaxBytes
	}
	if mem.Active {
		if n.ImageBytes-mem.AlertedBytes <= t.GrowthBytes {
			return d // already alerted for about this much
		}
		reason = ReasonGrowth
	}
	if !mem.AlertedAt.IsZero() {
		if wait := mem.AlertedAt.Add(t.Cooldown).Sub(now); wait > 0 {
			d.RecheckAfter = wait
			return d
		}
	}
	d.Reason = reason
	d.Memory = Memory{AlertedAt: now, AlertedBytes: n.ImageBytes, Active: true}
	d.Changed = true
	return d
}

// Alert renders the alert payload of a decision.
func Alert(n *events.NodeState, d Decision, prev Memory, t Thresholds, title string, now time.Time) events.ImageAlert {
	a := events.ImageAlert{
		Node: n.Name, NodeUID: n.UID, Reason: d.Reason, Title: title,
		ImageBytes: n.ImageBytes, ImageCount: n.ImageCount, CapacityBytes: n.EphemeralBytes, Percent: d.Percent,
		ImagesTruncated: n.ImagesTruncated, Severity: events.SeverityWarning, Time: now.UTC(),
		MaxBytes: t.MaxBytes, MaxPercent: t.MaxPercent, GrowthBytes: t.GrowthBytes,
	}
	if d.Reason == ReasonGrowth {
		a.PreviousBytes = prev.AlertedBytes
	}
	return a
}

// AlertID is the idempotent OPS id of an alert: the same node state and
// reason always give the same id, so a retried publish or a new leader
// re-deciding the same snapshot is dropped by JetStream's deduplication.
func AlertID(n *events.NodeState, reason string, now time.Time) string {
	version := n.ResourceVersion
	if version == "" {
		version = "t" + now.UTC().Format("20060102T150405Z")
	}
	return "report/images/" + n.UID + "/" + reason + "/" + version
}

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
	"fmt"
	"time"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// Alert reasons (also the metric label).
const (
	ReasonMaxBytes   = "maxBytes"
	ReasonMaxPercent = "maxPercent"
	ReasonGrowth     = "growth"
	// ReasonTruncated: the kubelet's image list was cut at its limit and the
	// listed sum, a lower bound, is close to a threshold (TruncatedPercent).
	ReasonTruncated = "truncated"
)

// Thresholds are the imageAlert settings.
type Thresholds struct {
	MaxBytes    int64   // 0 disables
	MaxPercent  float64 // of ephemeral-storage capacity; 0 disables
	GrowthBytes int64
	Cooldown    time.Duration
	// TruncatedPercent: a truncated list alerts once its lower bound reaches
	// this percentage of a threshold; 0 turns the rule off (the thresholds
	// then apply to the lower bound only).
	TruncatedPercent float64
}

// ThresholdsFrom reads the thresholds from the configuration section.
func ThresholdsFrom(c config.ImageAlert) Thresholds {
	return Thresholds{MaxBytes: c.MaxBytes, MaxPercent: c.MaxPercent, GrowthBytes: c.GrowthBytes,
		Cooldown: c.Cooldown.Duration, TruncatedPercent: c.TruncatedPercent}
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
	// Reason of the alert that made the node active: a node active for a
	// truncated list still alerts when it crosses a threshold for real.
	Reason string `json:"reason,omitempty"`
	// Node and UID name the node the memory is of: it is kept per node UID,
	// so a node re-created under the same name starts afresh.
	Node string `json:"node,omitempty"`
	UID  string `json:"uid,omitempty"`
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
//
// The kubelet lists at most 50 images per node (--node-status-max-images),
// the largest first, so on a node with more the sum is a lower bound and a
// node with 50 images of 1 GB (46.6 GiB listed) would never cross 50 GiB. A
// truncated list therefore alerts with reason truncated once its lower bound
// reaches TruncatedPercent of a threshold, and alerts again (maxBytes or
// maxPercent) if the lower bound then crosses the threshold itself.
func Decide(n *events.NodeState, mem Memory, t Thresholds, now time.Time) Decision {
	d := Decision{Memory: mem}
	if n.EphemeralBytes > 0 {
		d.Percent = float64(n.ImageBytes) * 100 / float64(n.EphemeralBytes)
	}
	reason := level(n, d.Percent, t)
	if reason == "" {
		if mem.Active {
			d.Memory.Active = false
			d.Changed = true
		}
		return d
	}
	if mem.Active {
		escalated := mem.Reason == ReasonTruncated && reason != ReasonTruncated
		if !escalated {
			if n.ImageBytes-mem.AlertedBytes <= t.GrowthBytes {
				return d // already alerted for about this much
			}
			reason = ReasonGrowth
		}
	}
	if !mem.AlertedAt.IsZero() {
		if wait := mem.AlertedAt.Add(t.Cooldown).Sub(now); wait > 0 {
			d.RecheckAfter = wait
			return d
		}
	}
	d.Reason = reason
	d.Memory = Memory{AlertedAt: now, AlertedBytes: n.ImageBytes, Active: true, Reason: reason, Node: n.Name, UID: n.UID}
	if reason == ReasonGrowth {
		d.Memory.Reason = mem.Reason // what the node is over stays what it was
	}
	d.Changed = true
	return d
}

// level is the alert a node's figures call for, ignoring memory: maxBytes or
// maxPercent over a threshold, truncated near one with a cut list, or none.
func level(n *events.NodeState, percent float64, t Thresholds) string {
	overBytes := t.MaxBytes > 0 && n.ImageBytes > t.MaxBytes
	overPercent := t.MaxPercent > 0 && n.EphemeralBytes > 0 && percent > t.MaxPercent
	switch {
	case overBytes:
		return ReasonMaxBytes
	case overPercent:
		return ReasonMaxPercent
	case n.ImagesTruncated && t.TruncatedPercent > 0:
		f := t.TruncatedPercent / 100
		if (t.MaxBytes > 0 && float64(n.ImageBytes) >= f*float64(t.MaxBytes)) ||
			(t.MaxPercent > 0 && n.EphemeralBytes > 0 && percent >= f*t.MaxPercent) {
			return ReasonTruncated
		}
	}
	return ""
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
	if n.ImagesTruncated {
		a.Note = fmt.Sprintf("at least %s: the kubelet lists only its %d largest images (--node-status-max-images); "+
			"raise that limit for the full figure", humanBytes(n.ImageBytes), n.ImageCount)
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

// humanBytes writes b in binary units with one decimal (46.6 GiB).
func humanBytes(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 4; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTP"[exp])
}

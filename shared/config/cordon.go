package config

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Cordon modes.
const (
	CordonModeCordon = "cordon" // spec.unschedulable
	CordonModeTaint  = "taint"  // a NoSchedule taint
)

// What the blast-radius caps count (autoCordon.capCounts).
const (
	CapCountsUnavailable = "unavailable" // opswire's marks + managed nodes cordoned by anyone or NotReady
	CapCountsMarks       = "marks"       // opswire's marks only
)

// TaintClusterAutoscalerToBeDeleted is the taint cluster-autoscaler puts on
// a node it is about to delete; it always counts as "held by someone else".
const TaintClusterAutoscalerToBeDeleted = "ToBeDeletedByClusterAutoscaler"

// AutoCordon is the seed's autoCordon section plus opswire's safety settings.
type AutoCordon struct {
	Enable bool `json:"enable"`
	// Interval is the reconcile tick on top of the event-driven path.
	Interval Duration `json:"interval"`
	// MaxPods: a node with this many non-terminated pods or more is cordoned.
	MaxPods int `json:"maxPods"`
	// MinPods: a node opswire cordoned is uncordoned at this count or below.
	MinPods int `json:"minPods"`
	// MaxPodsPercent and MinPodsPercent express the bounds as a share of the
	// node's allocatable pods; when set (> 0) they replace MaxPods/MinPods.
	MaxPodsPercent float64 `json:"maxPodsPercent"`
	MinPodsPercent float64 `json:"minPodsPercent"`
	// Mode is cordon (spec.unschedulable) or taint (a NoSchedule taint).
	Mode     string `json:"mode"`
	TaintKey string `json:"taintKey"`
	// NodeSelector is a label selector of managed nodes. Control-plane nodes
	// are excluded unless IncludeControlPlane is true.
	NodeSelector        string `json:"nodeSelector"`
	IncludeControlPlane bool   `json:"includeControlPlane"`
	// Blast-radius caps: no new cordon when opswire already holds this many
	// nodes (MaxCordonedNodes, 0 = no absolute cap) or this share of managed
	// nodes (MaxCordonedPercent).
	MaxCordonedNodes   int     `json:"maxCordonedNodes"`
	MaxCordonedPercent float64 `json:"maxCordonedPercent"`
	// CapCounts says which nodes count toward the caps: "unavailable"
	// (default: opswire's marks plus managed nodes that are cordoned by anyone
	// or NotReady, i.e. all schedulable capacity already out of service) or
	// "marks" (opswire's own marks only).
	CapCounts string `json:"capCounts"`
	// IgnoreTaintKeys are taint keys that do not make a node "tainted by a
	// person" (e.g. permanent placement taints such as dedicated=gpu). An entry
	// ending in "*" is a prefix. Kubernetes' own node.kubernetes.io/* and
	// node.cloudprovider.kubernetes.io/* taints are always ignored.
	IgnoreTaintKeys []string `json:"ignoreTaintKeys"`
	// AlwaysCountTaintKeys are taint keys that always make a node "tainted by
	// someone else", even when IgnoreTaintKeys or the Kubernetes prefixes
	// would ignore them (e.g. cluster-autoscaler's ToBeDeletedByClusterAutoscaler).
	AlwaysCountTaintKeys []string `json:"alwaysCountTaintKeys"`
	// DrainEvictingPercent: a node opswire cordoned whose pods are being
	// evicted through the Eviction API (DisruptionTarget condition, reason
	// EvictionByEvictionAPI) — at least two, and at least this share of its
	// pods — is being drained: opswire hands it over (removes its mark, keeps
	// the cordon), so it stays cordoned until a person uncordons it. 0 turns
	// the recognition off.
	DrainEvictingPercent float64 `json:"drainEvictingPercent"`
	// DrainEvictedPercent recognises a drain paced by PodDisruptionBudgets,
	// which evicts one pod at a time so that few are ever evicting at once:
	// when a node opswire cordoned falls to minPods and at least two, and at
	// least this share, of the pods that left it since opswire cordoned it
	// left through the Eviction API, opswire hands it over instead of
	// uncordoning it. 0 turns this recognition off (DrainEvictingPercent
	// still applies).
	DrainEvictedPercent float64 `json:"drainEvictedPercent"`
	// MaxActionsPerMinute rate-limits writes: at most this many cordons and
	// uncordons in any sliding RateWindow (default one minute), counting the
	// previous leaders' actions recorded in OPS.
	MaxActionsPerMinute int      `json:"maxActionsPerMinute"`
	RateWindow          Duration `json:"rateWindow"`
	DryRun              bool     `json:"dryRun"`
}

func (a *AutoCordon) setDefaults() {
	a.Enable = true
	a.Interval = D(time.Minute)
	a.MaxPods = 100
	a.MinPods = 90
	a.Mode = CordonModeCordon
	a.TaintKey = "node.kubernetes.io/autocordon"
	a.MaxCordonedPercent = 20
	a.CapCounts = CapCountsUnavailable
	a.AlwaysCountTaintKeys = []string{TaintClusterAutoscalerToBeDeleted}
	a.DrainEvictingPercent = 50
	a.DrainEvictedPercent = 50
	a.MaxActionsPerMinute = 60
	a.RateWindow = D(time.Minute)
}

func (a *AutoCordon) validate(p string, errs *Errors) {
	if a.Interval.Duration <= 0 {
		errs.add(join(p, "interval"), "must be positive")
	}
	if a.MaxPodsPercent > 0 || a.MinPodsPercent > 0 {
		if a.MaxPodsPercent <= 0 || a.MaxPodsPercent > 100 {
			errs.add(join(p, "maxPodsPercent"), "must be in (0, 100], got %v", a.MaxPodsPercent)
		}
		if a.MinPodsPercent < 0 || a.MinPodsPercent >= a.MaxPodsPercent {
			errs.add(join(p, "minPodsPercent"), "must be in [0, maxPodsPercent), got %v", a.MinPodsPercent)
		}
	} else {
		if a.MaxPods < 1 {
			errs.add(join(p, "maxPods"), "must be at least 1, got %d", a.MaxPods)
		}
		if a.MinPods < 0 || a.MinPods >= a.MaxPods {
			errs.add(join(p, "minPods"), "must be at least 0 and less than maxPods (%d), got %d", a.MaxPods, a.MinPods)
		}
	}
	if a.Mode != CordonModeCordon && a.Mode != CordonModeTaint {
		errs.add(join(p, "mode"), "must be %q or %q, got %q", CordonModeCordon, CordonModeTaint, a.Mode)
	}
	if a.Mode == CordonModeTaint && a.TaintKey == "" {
		errs.add(join(p, "taintKey"), "must not be empty in taint mode")
	} else if msgs := validation.IsQualifiedName(a.TaintKey); a.TaintKey != "" && len(msgs) > 0 {
		errs.add(join(p, "taintKey"), "%q is not a valid taint key: %s", a.TaintKey, strings.Join(msgs, "; "))
	}
	if _, err := labels.Parse(a.NodeSelector); err != nil {
		errs.add(join(p, "nodeSelector"), "invalid label selector: %v", err)
	}
	if a.MaxCordonedNodes < 0 {
		errs.add(join(p, "maxCordonedNodes"), "must not be negative")
	}
	if a.MaxCordonedPercent < 0 || a.MaxCordonedPercent > 100 {
		errs.add(join(p, "maxCordonedPercent"), "must be in [0, 100], got %v", a.MaxCordonedPercent)
	}
	if a.CapCounts != CapCountsUnavailable && a.CapCounts != CapCountsMarks {
		errs.add(join(p, "capCounts"), "must be %q or %q, got %q", CapCountsUnavailable, CapCountsMarks, a.CapCounts)
	}
	validateTaintKeys(join(p, "ignoreTaintKeys"), a.IgnoreTaintKeys, errs)
	validateTaintKeys(join(p, "alwaysCountTaintKeys"), a.AlwaysCountTaintKeys, errs)
	if a.DrainEvictingPercent < 0 || a.DrainEvictingPercent > 100 {
		errs.add(join(p, "drainEvictingPercent"), "must be in [0, 100], got %v", a.DrainEvictingPercent)
	}
	if a.DrainEvictedPercent < 0 || a.DrainEvictedPercent > 100 {
		errs.add(join(p, "drainEvictedPercent"), "must be in [0, 100], got %v", a.DrainEvictedPercent)
	}
	if a.MaxActionsPerMinute < 1 || a.MaxActionsPerMinute > MaxActionsPerWindow {
		errs.add(join(p, "maxActionsPerMinute"), "must be in [1, %d], got %d", MaxActionsPerWindow, a.MaxActionsPerMinute)
	}
	if a.RateWindow.Duration <= 0 {
		errs.add(join(p, "rateWindow"), "must be positive")
	}
}

// validateTaintKeys checks a list of taint keys, where an entry may end in
// "*" (a prefix; "*" alone matches every key).
func validateTaintKeys(field string, keys []string, errs *Errors) {
	for i, k := range keys {
		key := strings.TrimSuffix(k, "*")
		if key == "" && k == "*" {
			continue
		}
		if strings.HasSuffix(k, "*") {
			key = strings.TrimSuffix(key, "/")
		}
		if msgs := validation.IsQualifiedName(key); len(msgs) > 0 {
			errs.add(fmt.Sprintf("%s[%d]", field, i), "%q is not a taint key or a prefix ending in *: %s", k, strings.Join(msgs, "; "))
		}
	}
}

// Selector returns the parsed node selector (validated by Validate).
func (a *AutoCordon) Selector() labels.Selector {
	s, err := labels.Parse(a.NodeSelector)
	if err != nil {
		return labels.Nothing()
	}
	return s
}

// Warnings names the trade-offs of a valid section that a person should have
// chosen knowingly; the service logs them at start-up.
//
// Taint mode: DaemonSet pods tolerate a cordon (the DaemonSet controller adds
// a toleration of node.kubernetes.io/unschedulable to every one) but not a
// NoSchedule taint of opswire's key, so on a node opswire has tainted, a
// DaemonSet pod that is deleted (a rolling update of a CNI or a log agent) is
// not re-created until the taint is lifted. A warning rather than a refusal:
// a DaemonSet can be given the toleration, and an existing taint-mode
// deployment must not stop starting on an upgrade.
func (a *AutoCordon) Warnings() []string {
	if !a.Enable || a.Mode != CordonModeTaint {
		return nil
	}
	return []string{fmt.Sprintf("autoCordon.mode is %q: DaemonSet pods do not tolerate the taint %s:NoSchedule, "+
		"so on a node opswire has tainted a DaemonSet pod that is deleted (a rolling update of a CNI or log agent) "+
		"is not re-created until opswire lifts the taint; give such DaemonSets a toleration of %s, "+
		"or use mode %q, which DaemonSet pods tolerate", a.Mode, a.TaintKey, a.TaintKey, CordonModeCordon)}
}

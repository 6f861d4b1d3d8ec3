package config

import (
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
	if a.MaxActionsPerMinute < 1 {
		errs.add(join(p, "maxActionsPerMinute"), "must be at least 1")
	}
	if a.RateWindow.Duration <= 0 {
		errs.add(join(p, "rateWindow"), "must be positive")
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

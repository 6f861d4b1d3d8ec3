package config

import "time"

// DelException is the seed's delException section (the cleanup actor) plus
// opswire's filters and safety settings.
type DelException struct {
	Enable bool `json:"enable"`
	// Interval is the reconcile tick on top of the event-driven path.
	Interval Duration `json:"interval"`
	// MsgTitle and APIURL become a Feishu receiver and route for cleanup results.
	MsgTitle string `json:"msgtitle"`
	APIURL   Secret `json:"apiurl"`
	// Reasons are the status.reason values of Failed pods that are deleted.
	Reasons []string `json:"reasons"`
	// MinAge is how long a Failed pod is kept before deletion.
	MinAge Duration `json:"minAge"`
	// TerminatingTimeout is added to deletionTimestamp + grace period before a
	// stuck Terminating pod is force-deleted. Zero disables force deletion.
	TerminatingTimeout Duration `json:"terminatingTimeout"`
	// RemoveFinalizers lets force deletion clear finalizers (otherwise such
	// pods are only reported).
	RemoveFinalizers bool `json:"removeFinalizers"`
	// AllowStatefulSetOnReadyNode lets force deletion act on StatefulSet pods
	// whose node is still Ready (two copies of one identity may then run).
	AllowStatefulSetOnReadyNode bool       `json:"allowStatefulSetOnReadyNode"`
	Namespaces                  Namespaces `json:"namespaces"`
	// OptOutLabel: pods carrying this label key are never touched.
	OptOutLabel string `json:"optOutLabel"`
	// MaxDeletionsPerMinute caps deletions per RateWindow (default one minute).
	MaxDeletionsPerMinute int      `json:"maxDeletionsPerMinute"`
	RateWindow            Duration `json:"rateWindow"`
	DryRun                bool     `json:"dryRun"`
}

func (d *DelException) setDefaults() {
	d.Enable = true
	d.Interval = D(2 * time.Minute)
	d.Reasons = []string{"Evicted"}
	d.MinAge = D(0)
	d.TerminatingTimeout = D(5 * time.Minute)
	d.OptOutLabel = "opswire.io/ignore"
	d.MaxDeletionsPerMinute = 60
	d.RateWindow = D(time.Minute)
}

func (d *DelException) validate(p string, errs *Errors) {
	if d.Interval.Duration <= 0 {
		errs.add(join(p, "interval"), "must be positive")
	}
	for i, r := range d.Reasons {
		if r == "" {
			errs.add(join(p, "reasons")+"["+itoa(i)+"]", "must not be empty")
		}
	}
	if d.MinAge.Duration < 0 {
		errs.add(join(p, "minAge"), "must not be negative")
	}
	if d.TerminatingTimeout.Duration < 0 {
		errs.add(join(p, "terminatingTimeout"), "must not be negative")
	}
	if d.MaxDeletionsPerMinute < 1 {
		errs.add(join(p, "maxDeletionsPerMinute"), "must be at least 1")
	}
	if d.RateWindow.Duration <= 0 {
		errs.add(join(p, "rateWindow"), "must be positive")
	}
}

package config

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DelException is the seed's delException section (the cleanup actor) plus
// opswire's filters and safety settings.
type DelException struct {
	Enable bool `json:"enable"`
	// Interval is the reconcile tick on top of the event-driven path.
	Interval Duration `json:"interval"`
	// MsgTitle and APIURL become a Feishu receiver and route for cleanup results.
	MsgTitle string `json:"msgtitle"`
	APIURL   Secret `json:"apiurl"`
	// Secret/SecretFile/SecretEnv and Keyword sign the apiurl's receiver
	// (see SeedReceiver in notifier.go).
	Secret     Secret `json:"secret"`
	SecretFile string `json:"secretFile"`
	SecretEnv  string `json:"secretEnv"`
	Keyword    string `json:"keyword"`
	// Reasons are the status.reason values of Failed pods that are deleted.
	Reasons []string `json:"reasons"`
	// MinAge is how long a Failed pod is kept before deletion.
	MinAge Duration `json:"minAge"`
	// TerminatingTimeout is added to deletionTimestamp + grace period before a
	// stuck Terminating pod is force-deleted. Zero disables force deletion.
	TerminatingTimeout Duration `json:"terminatingTimeout"`
	// RemoveFinalizers lets force deletion clear the finalizers of a pod
	// still Terminating TerminatingTimeout after its deletion (never on a
	// Failed pod's first visit, never the Job controller's job-tracking
	// finalizer); otherwise such pods are only reported.
	RemoveFinalizers bool `json:"removeFinalizers"`
	// AllowStatefulSetOnReadyNode lets force deletion act on pods with
	// identity, storage or a node of their own (StatefulSet and DaemonSet
	// pods, pods with a volume other than node-local disposable ones) whose node is still Ready
	// (two copies of one identity, or two agents on one node, may then run).
	AllowStatefulSetOnReadyNode bool `json:"allowStatefulSetOnReadyNode"`
	// StatefulNotReadyTimeout lets force deletion act on pods with identity
	// or storage whose node has been Unknown (no kubelet reporting) for at
	// least this long; a node whose kubelet reports NotReady never counts. Zero
	// (the default) never does: only a deleted node, or a node not Ready
	// and tainted node.kubernetes.io/out-of-service, releases them, because
	// in a network partition the kubelet may still run the pod.
	StatefulNotReadyTimeout Duration `json:"statefulNotReadyTimeout"`
	// BrakeNotReadyShare pauses every force deletion while more than this
	// share of the nodes is not Ready (a mass failure or a partition of the
	// control plane, not dead nodes). 1 disables the brake.
	BrakeNotReadyShare float64    `json:"brakeNotReadyShare"`
	Namespaces         Namespaces `json:"namespaces"`
	// OptOutLabel: pods carrying this label key (any value) are never
	// touched. Empty disables the opt-out. The watcher carries only labels
	// under opswire.io/ into KUBE; the live re-check before every write reads
	// all labels, so another key still protects the pod.
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
	d.BrakeNotReadyShare = 1.0 / 3
}

func (d *DelException) validate(p string, errs *Errors) {
	if d.Interval.Duration <= 0 {
		errs.add(join(p, "interval"), "must be positive")
	}
	// Reasons match case-insensitively, so "evicted" repeats "Evicted".
	seen := map[string]bool{}
	for i, r := range d.Reasons {
		switch {
		case r == "":
			errs.add(join(p, "reasons")+"["+itoa(i)+"]", "must not be empty")
		case seen[strings.ToLower(r)]:
			errs.add(join(p, "reasons")+"["+itoa(i)+"]", "duplicate reason %q", r)
		}
		seen[strings.ToLower(r)] = true
	}
	if d.OptOutLabel != "" {
		if msgs := validation.IsQualifiedName(d.OptOutLabel); len(msgs) > 0 {
			errs.add(join(p, "optOutLabel"), "not a valid label key: %s", strings.Join(msgs, "; "))
		}
	}
	if d.MinAge.Duration < 0 {
		errs.add(join(p, "minAge"), "must not be negative")
	}
	if d.TerminatingTimeout.Duration < 0 {
		errs.add(join(p, "terminatingTimeout"), "must not be negative")
	}
	if d.StatefulNotReadyTimeout.Duration < 0 {
		errs.add(join(p, "statefulNotReadyTimeout"), "must not be negative")
	}
	if d.BrakeNotReadyShare <= 0 || d.BrakeNotReadyShare > 1 {
		errs.add(join(p, "brakeNotReadyShare"), "must be more than 0 and at most 1 (1 disables the brake)")
	}
	if d.MaxDeletionsPerMinute < 1 || d.MaxDeletionsPerMinute > MaxActionsPerWindow {
		errs.add(join(p, "maxDeletionsPerMinute"), "must be in [1, %d], got %d", MaxActionsPerWindow, d.MaxDeletionsPerMinute)
	}
	if d.RateWindow.Duration <= 0 {
		errs.add(join(p, "rateWindow"), "must be positive")
	}
}

// MaxActionsPerWindow bounds an actor's rate limit: the window keeps the time
// of every action in it, so a mistyped 1e9 lets its memory grow without a
// bound; a janitor that needs more than a million writes a window is not
// rate-limited at all.
const MaxActionsPerWindow = 1000000

package restarts

import (
	"time"

	"github.com/opswire/opswire/shared/events"
)

// Baseline is what increase mode counts from: the restart count of every
// container at the previous scheduled report, by pod UID then container name.
// Pods without restarts are left out (an absent pod counts as zero), which
// keeps it small: at 150,000 pods most have never restarted.
type Baseline struct {
	Time time.Time
	Pods map[string]map[string]int32
}

// Snapshot records the current counts as the next baseline.
func Snapshot(pods []*events.PodState, at time.Time) *Baseline {
	b := &Baseline{Time: at, Pods: map[string]map[string]int32{}}
	for _, p := range pods {
		if p == nil || p.Op == events.OpDelete || p.UID == "" {
			continue
		}
		var m map[string]int32
		for _, c := range p.Containers {
			if c.Restarts == 0 {
				continue
			}
			if m == nil {
				m = make(map[string]int32, len(p.Containers))
			}
			m[c.Name] = c.Restarts
		}
		if m != nil {
			b.Pods[p.UID] = m
		}
	}
	return b
}

// Unknown is what KV may hold after a failed save of next over old: any
// pod of either, with counts unknown (a save fails half-way). Diffing the
// next baseline against it rewrites every pod and forgets every gone one,
// instead of skipping the entries whose write failed and leaving stale
// counts in KV for the next leader to load.
func Unknown(old, next *Baseline) *Baseline {
	u := &Baseline{Pods: map[string]map[string]int32{}}
	for _, b := range []*Baseline{old, next} {
		if b == nil {
			continue
		}
		for uid := range b.Pods {
			u.Pods[uid] = nil // nil never matches: Diff rewrites it
		}
	}
	return u
}

// Diff lists what changed from old to b: pods whose counts to write, and pod
// UIDs to forget (gone, or back to no restarts). Writing only the difference
// keeps a report's KV traffic proportional to the pods that restarted.
func (b *Baseline) Diff(old *Baseline) (put map[string]map[string]int32, remove []string) {
	put = map[string]map[string]int32{}
	var prev map[string]map[string]int32
	if old != nil {
		prev = old.Pods
	}
	for uid, m := range b.Pods {
		if !sameCounts(prev[uid], m) {
			put[uid] = m
		}
	}
	for uid := range prev {
		if _, ok := b.Pods[uid]; !ok {
			remove = append(remove, uid)
		}
	}
	return put, remove
}

func sameCounts(a, b map[string]int32) bool {
	if len(a) != len(b) || a == nil {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

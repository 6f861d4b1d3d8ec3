// Package restarts builds the restart report: every pod whose restart count
// is over the threshold, per pod or grouped by workload, sorted by restarts.
//
// Build is a pure function of the mirrored pod states (and, in increase mode,
// the counts at the previous report), so the same state always gives the same
// report: a replica that takes over mid-tick rebuilds what the old leader
// would have sent, and tests need no NATS. It allocates only for offending
// pods, because at 150,000 pods nearly every pod is not one.
package restarts

import (
	"sort"
	"time"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// Options are the sendReport settings that shape a report.
type Options struct {
	Title string
	// Threshold: pods whose restarts (summed over containers) are greater are reported.
	Threshold  int64
	Mode       string // config.ReportModeTotal or config.ReportModeIncrease
	GroupBy    string // config.GroupByPod or config.GroupByWorkload
	Top        int    // 0 = every row
	Namespaces config.Namespaces
}

// OptionsFrom reads the options from the configuration section.
func OptionsFrom(c config.SendReport) Options {
	return Options{
		Title: c.MsgTitle, Threshold: c.Total, Mode: c.Mode, GroupBy: c.GroupBy,
		Top: c.Top, Namespaces: c.Namespaces,
	}
}

// Build makes the report of pods at tick. base is the baseline of increase
// mode (nil: none yet, counts are since pod start); total mode ignores it.
// ID and OnDemand are left to the caller.
func Build(pods []*events.PodState, base *Baseline, o Options, tick time.Time) events.RestartReport {
	rep := events.RestartReport{
		Title: o.Title, Tick: tick.UTC(), Mode: o.Mode, GroupBy: o.GroupBy,
		Threshold: o.Threshold, Severity: events.SeverityInfo,
	}
	increase := o.Mode == config.ReportModeIncrease
	if !increase {
		base = nil
	} else if base != nil && !base.Time.IsZero() {
		since := base.Time.UTC()
		rep.Since = &since
	}
	rows := make([]events.RestartRow, 0, 16)
	for _, p := range pods {
		if p == nil || p.Op == events.OpDelete || !o.Namespaces.Allows(p.Namespace) {
			continue
		}
		rep.PodsSeen++
		var prev map[string]int32
		if base != nil {
			prev = base.Pods[p.UID]
		}
		if counted(p, prev) <= o.Threshold {
			continue
		}
		rep.OffendingPods++
		row := events.RestartRow{
			Namespace: p.Namespace, Owner: p.Owner, Pod: p.Name, Node: p.NodeName, Pods: 1,
			Containers: make([]events.Container, 0, len(p.Containers)),
		}
		for _, c := range p.Containers {
			n := gained(c, prev)
			if n == 0 {
				continue
			}
			c.Restarts = n
			row.Containers = append(row.Containers, c)
			row.Restarts += int64(n)
			if c.LastReason != "" {
				if rep.Reasons == nil {
					rep.Reasons = map[string]int{}
				}
				rep.Reasons[c.LastReason]++
			}
		}
		rows = append(rows, row)
	}
	if o.GroupBy == config.GroupByWorkload {
		rows = groupByWorkload(rows)
	} else {
		for i := range rows {
			rows[i].Pods = 0 // implied by Pod
		}
	}
	sortRows(rows)
	rep.Offenders = len(rows)
	for _, r := range rows {
		rep.Restarts += r.Restarts
	}
	if o.Top > 0 && len(rows) > o.Top {
		rep.Truncated = len(rows) - o.Top
		rows = rows[:o.Top:o.Top]
	}
	rep.Rows = rows
	if rep.Offenders > 0 {
		rep.Severity = events.SeverityWarning
	}
	return rep
}

// counted is the pod's restarts as the report counts them: all of them, or
// those gained since the baseline.
func counted(p *events.PodState, prev map[string]int32) int64 {
	var n int64
	for _, c := range p.Containers {
		n += int64(gained(c, prev))
	}
	return n
}

// gained is a container's restarts since the baseline. A count below the
// baseline cannot happen for one pod UID (kubelet counters only grow), but
// if it does the whole count is new.
func gained(c events.Container, prev map[string]int32) int32 {
	if prev == nil {
		return c.Restarts
	}
	if b := prev[c.Name]; c.Restarts >= b {
		return c.Restarts - b
	}
	return c.Restarts
}

func sortRows(rows []events.RestartRow) {
	sort.Slice(rows, func(i, j int) bool {
		a, b := &rows[i], &rows[j]
		if a.Restarts != b.Restarts {
			return a.Restarts > b.Restarts
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if ak, bk := ownerKind(a), ownerKind(b); ak != bk {
			return ak < bk
		}
		if an, bn := ownerName(a), ownerName(b); an != bn {
			return an < bn
		}
		return a.Pod < b.Pod
	})
}

func ownerKind(r *events.RestartRow) string {
	if r.Owner == nil {
		return ""
	}
	return r.Owner.Kind
}

func ownerName(r *events.RestartRow) string {
	if r.Owner == nil {
		return ""
	}
	return r.Owner.Name
}

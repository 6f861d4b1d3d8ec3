package restarts

import (
	"time"

	"github.com/opswire/opswire/shared/events"
)

type workloadKey struct{ namespace, kind, name string }

// groupByWorkload folds pod rows into one row per owning workload (the
// watcher already resolved ReplicaSets to their Deployment). The threshold
// was applied per pod, so `total` keeps the seed's meaning; grouping only
// shortens the report when many replicas of one workload crash alike.
// Pods without an owner keep their own row.
func groupByWorkload(rows []events.RestartRow) []events.RestartRow {
	out := rows[:0:0]
	index := map[workloadKey]int{}
	for _, r := range rows {
		if r.Owner == nil {
			out = append(out, r)
			continue
		}
		k := workloadKey{r.Namespace, r.Owner.Kind, r.Owner.Name}
		i, ok := index[k]
		if !ok {
			index[k] = len(out)
			r.Pod = ""
			out = append(out, r)
			continue
		}
		g := &out[i]
		g.Pods += r.Pods
		g.Restarts += r.Restarts
		if g.Node != r.Node {
			g.Node = "" // spread over several nodes
		}
		g.Containers = mergeContainers(g.Containers, r.Containers)
	}
	return out
}

// mergeContainers sums restarts per container name and keeps the most recent
// termination's reason and exit code.
func mergeContainers(into, from []events.Container) []events.Container {
	for _, c := range from {
		found := false
		for i := range into {
			if into[i].Name != c.Name {
				continue
			}
			found = true
			into[i].Restarts += c.Restarts
			if later(c.LastFinished, into[i].LastFinished) {
				into[i].LastReason, into[i].LastExitCode, into[i].LastFinished = c.LastReason, c.LastExitCode, c.LastFinished
			}
			break
		}
		if !found {
			into = append(into, c)
		}
	}
	return into
}

// later reports whether termination time a is after b (an unknown time is never later).
func later(a, b *time.Time) bool {
	if a == nil {
		return false
	}
	return b == nil || a.After(*b)
}

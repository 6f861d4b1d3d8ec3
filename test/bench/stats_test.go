//go:build bench

package bench

import (
	"sort"
	"time"
)

// latencies collects samples of one measured path.
type latencies []time.Duration

// quantile returns the q-quantile (nearest rank) in milliseconds, or -1 when empty.
func (l latencies) quantile(q float64) float64 {
	if len(l) == 0 {
		return -1
	}
	s := append(latencies(nil), l...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(q*float64(len(s))+0.999999) - 1
	rank = min(max(rank, 0), len(s)-1)
	return float64(s[rank].Microseconds()) / 1000
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

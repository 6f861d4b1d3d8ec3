package restarts

import "testing"

// BenchmarkFloorScan150k is the floor of BenchmarkBuildReport150k (issue 8,
// figure 5): the least any report must do, one pass over the 150,000 pod
// states summing restarts and keeping the offenders, without rows or sorting.
func BenchmarkFloorScan150k(b *testing.B) {
	pods := synthetic150k()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n := 0
		for _, p := range pods {
			if p.Restarts() > 100 {
				n++
			}
		}
		if n != 1500 {
			b.Fatalf("offenders %d", n)
		}
	}
}

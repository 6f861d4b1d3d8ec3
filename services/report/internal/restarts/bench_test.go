package restarts

import (
	"fmt"
	"testing"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

// synthetic150k is a cluster at the Kubernetes scalability limit: 150,000
// pods on 5,000 nodes in 500 Deployments, two containers each; one pod in a
// hundred restarted more than the threshold, one in ten restarted a little.
func synthetic150k() []*events.PodState {
	const n = 150_000
	pods := make([]*events.PodState, n)
	for i := range pods {
		var app int32
		switch {
		case i%100 == 0:
			app = int32(101 + i%400)
		case i%10 == 0:
			app = int32(i % 7)
		}
		pods[i] = &events.PodState{
			Op: events.OpUpsert, UID: fmt.Sprintf("uid-%06d", i), Namespace: fmt.Sprintf("ns-%03d", i%200),
			Name: fmt.Sprintf("pod-%06d", i), NodeName: fmt.Sprintf("node-%04d", i%5000), Phase: "Running",
			Owner: &events.Owner{Kind: "Deployment", Name: fmt.Sprintf("deploy-%03d", i%500)},
			Containers: []events.Container{
				{Name: "app", Restarts: app, LastReason: "OOMKilled", LastExitCode: 137},
				{Name: "proxy"},
			},
		}
	}
	return pods
}

// BenchmarkBuildReport150k builds the seed's report (total mode, one row per
// pod) over 150,000 pod states; 1,500 of them are offenders.
func BenchmarkBuildReport150k(b *testing.B) {
	pods := synthetic150k()
	o := Options{Threshold: 100, Mode: config.ReportModeTotal, GroupBy: config.GroupByPod}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rep := Build(pods, nil, o, tick)
		if rep.Offenders != 1500 {
			b.Fatalf("offenders %d", rep.Offenders)
		}
	}
}

// BenchmarkBuildReport150kIncreaseWorkload is the costliest shape: baseline
// lookups for every pod and grouping by workload.
func BenchmarkBuildReport150kIncreaseWorkload(b *testing.B) {
	pods := synthetic150k()
	base := Snapshot(pods, tick)
	for _, p := range pods[:len(pods)/2] { // half the pods gain 150 restarts
		p.Containers[0].Restarts += 150
	}
	o := Options{Threshold: 100, Mode: config.ReportModeIncrease, GroupBy: config.GroupByWorkload}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rep := Build(pods, base, o, tick)
		if rep.OffendingPods != len(pods)/2 {
			b.Fatalf("offending pods %d", rep.OffendingPods)
		}
	}
}

// BenchmarkSnapshot150k is the increase-mode baseline taken after each report.
func BenchmarkSnapshot150k(b *testing.B) {
	pods := synthetic150k()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		Snapshot(pods, tick)
	}
}

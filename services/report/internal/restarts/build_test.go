package restarts

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

var tick = time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)

func at(min int) *time.Time {
	t := tick.Add(time.Duration(-min) * time.Minute)
	return &t
}

// pod builds a pod state; containers are given as name/restarts pairs.
func pod(ns, name, node string, owner *events.Owner, containers ...events.Container) *events.PodState {
	return &events.PodState{
		Op: events.OpUpsert, UID: ns + "-" + name + "-uid", Namespace: ns, Name: name,
		NodeName: node, Phase: "Running", Owner: owner, Containers: containers,
	}
}

func ctr(name string, restarts int32, reason string, exit int32, finished *time.Time) events.Container {
	return events.Container{Name: name, Restarts: restarts, LastReason: reason, LastExitCode: exit, LastFinished: finished}
}

func deploy(name string) *events.Owner { return &events.Owner{Kind: "Deployment", Name: name} }

func rowKeys(rows []events.RestartRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Namespace + "/" + r.Pod
		if r.Pod == "" && r.Owner != nil {
			out[i] = r.Namespace + "/" + r.Owner.Kind + "/" + r.Owner.Name
		}
	}
	return out
}

func TestBuild(t *testing.T) {
	total := func(th int64) Options {
		return Options{Title: "t", Threshold: th, Mode: config.ReportModeTotal, GroupBy: config.GroupByPod}
	}
	tests := []struct {
		name          string
		pods          []*events.PodState
		base          *Baseline
		opts          Options
		wantRows      []string
		wantRestarts  []int64 // per row
		wantOffenders int
		wantTruncated int
		wantSum       int64
		wantSeen      int
	}{
		{
			name: "seed threshold: 150 reported, 5 not",
			pods: []*events.PodState{
				pod("shop", "api-1", "n1", deploy("api"), ctr("app", 150, "OOMKilled", 137, at(3))),
				pod("shop", "api-2", "n1", deploy("api"), ctr("app", 5, "Error", 1, at(9))),
			},
			opts:     total(100),
			wantRows: []string{"shop/api-1"}, wantRestarts: []int64{150}, wantOffenders: 1, wantSum: 150, wantSeen: 2,
		},
		{
			name: "restarts are summed over containers and the threshold is strict",
			pods: []*events.PodState{
				pod("a", "sum", "n1", nil, ctr("app", 60, "", 0, nil), ctr("proxy", 41, "", 0, nil)),
				pod("a", "equal", "n1", nil, ctr("app", 100, "", 0, nil)),
			},
			opts:     total(100),
			wantRows: []string{"a/sum"}, wantRestarts: []int64{101}, wantOffenders: 1, wantSum: 101, wantSeen: 2,
		},
		{
			name: "sorted by restarts, then namespace and pod",
			pods: []*events.PodState{
				pod("b", "x", "n1", nil, ctr("c", 20, "", 0, nil)),
				pod("a", "y", "n1", nil, ctr("c", 20, "", 0, nil)),
				pod("a", "x", "n1", nil, ctr("c", 20, "", 0, nil)),
				pod("z", "big", "n1", nil, ctr("c", 90, "", 0, nil)),
			},
			opts:          total(10),
			wantRows:      []string{"z/big", "a/x", "a/y", "b/x"},
			wantRestarts:  []int64{90, 20, 20, 20},
			wantOffenders: 4, wantSum: 150, wantSeen: 4,
		},
		{
			name: "top keeps the worst rows and counts the rest",
			pods: []*events.PodState{
				pod("a", "p1", "n1", nil, ctr("c", 11, "", 0, nil)),
				pod("a", "p2", "n1", nil, ctr("c", 33, "", 0, nil)),
				pod("a", "p3", "n1", nil, ctr("c", 22, "", 0, nil)),
			},
			opts:     func() Options { o := total(10); o.Top = 2; return o }(),
			wantRows: []string{"a/p2", "a/p3"}, wantRestarts: []int64{33, 22},
			wantOffenders: 3, wantTruncated: 1, wantSum: 66, wantSeen: 3,
		},
		{
			name: "namespace include and exclude",
			pods: []*events.PodState{
				pod("prod", "p", "n1", nil, ctr("c", 50, "", 0, nil)),
				pod("prod-canary", "p", "n1", nil, ctr("c", 50, "", 0, nil)),
				pod("dev", "p", "n1", nil, ctr("c", 50, "", 0, nil)),
			},
			opts: func() Options {
				o := total(10)
				o.Namespaces = config.Namespaces{Include: []string{"prod", "prod-canary"}, Exclude: []string{"prod-canary"}}
				return o
			}(),
			wantRows: []string{"prod/p"}, wantRestarts: []int64{50}, wantOffenders: 1, wantSum: 50, wantSeen: 1,
		},
		{
			name: "tombstones and nil states are not pods",
			pods: []*events.PodState{
				nil,
				func() *events.PodState {
					p := pod("a", "gone", "n1", nil, ctr("c", 500, "", 0, nil))
					p.Op = events.OpDelete
					return p
				}(),
			},
			opts:     total(10),
			wantRows: []string{},
		},
		{
			name:     "total mode ignores a baseline",
			pods:     []*events.PodState{pod("a", "p", "n1", nil, ctr("c", 150, "", 0, nil))},
			base:     &Baseline{Time: tick.Add(-time.Hour), Pods: map[string]map[string]int32{"a-p-uid": {"c": 149}}},
			opts:     total(100),
			wantRows: []string{"a/p"}, wantRestarts: []int64{150}, wantOffenders: 1, wantSum: 150, wantSeen: 1,
		},
		{
			name: "increase mode counts from the baseline",
			pods: []*events.PodState{
				pod("a", "grew", "n1", nil, ctr("c", 150, "", 0, nil), ctr("d", 7, "", 0, nil)),
				pod("a", "new", "n1", nil, ctr("c", 8, "", 0, nil)),
				pod("a", "flat", "n1", nil, ctr("c", 150, "", 0, nil)),
				pod("a", "small", "n1", nil, ctr("c", 154, "", 0, nil)),
			},
			base: &Baseline{Time: tick.Add(-time.Hour), Pods: map[string]map[string]int32{
				"a-grew-uid": {"c": 140, "d": 7}, "a-flat-uid": {"c": 150}, "a-small-uid": {"c": 150},
			}},
			opts:     Options{Threshold: 5, Mode: config.ReportModeIncrease, GroupBy: config.GroupByPod},
			wantRows: []string{"a/grew", "a/new"}, wantRestarts: []int64{10, 8}, wantOffenders: 2, wantSum: 18, wantSeen: 4,
		},
		{
			name:     "increase mode without a baseline counts since pod start",
			pods:     []*events.PodState{pod("a", "p", "n1", nil, ctr("c", 150, "", 0, nil))},
			opts:     Options{Threshold: 100, Mode: config.ReportModeIncrease, GroupBy: config.GroupByPod},
			wantRows: []string{"a/p"}, wantRestarts: []int64{150}, wantOffenders: 1, wantSum: 150, wantSeen: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Build(tc.pods, tc.base, tc.opts, tick)
			if got := rowKeys(rep.Rows); !reflect.DeepEqual(got, tc.wantRows) {
				t.Fatalf("rows %v, want %v", got, tc.wantRows)
			}
			for i, r := range rep.Rows {
				if r.Restarts != tc.wantRestarts[i] {
					t.Errorf("row %d restarts %d, want %d", i, r.Restarts, tc.wantRestarts[i])
				}
				var sum int64
				for _, c := range r.Containers {
					sum += int64(c.Restarts)
				}
				if sum != r.Restarts {
					t.Errorf("row %d: containers sum to %d, row says %d", i, sum, r.Restarts)
				}
			}
			if rep.Offenders != tc.wantOffenders || rep.Truncated != tc.wantTruncated || rep.Restarts != tc.wantSum || rep.PodsSeen != tc.wantSeen {
				t.Fatalf("summary offenders=%d truncated=%d restarts=%d seen=%d, want %d %d %d %d",
					rep.Offenders, rep.Truncated, rep.Restarts, rep.PodsSeen, tc.wantOffenders, tc.wantTruncated, tc.wantSum, tc.wantSeen)
			}
			wantSev := events.SeverityInfo
			if tc.wantOffenders > 0 {
				wantSev = events.SeverityWarning
			}
			if rep.Severity != wantSev || !rep.Tick.Equal(tick) || rep.Threshold != tc.opts.Threshold {
				t.Fatalf("severity %s tick %s threshold %d", rep.Severity, rep.Tick, rep.Threshold)
			}
		})
	}
}

func TestBuildRowDetails(t *testing.T) {
	pods := []*events.PodState{
		pod("shop", "api-1", "node-a", deploy("api"),
			ctr("app", 140, "OOMKilled", 137, at(2)), ctr("sidecar", 10, "Error", 1, at(30)), ctr("init-free", 0, "", 0, nil)),
	}
	rep := Build(pods, nil, Options{Threshold: 100, Mode: config.ReportModeTotal, GroupBy: config.GroupByPod}, tick)
	want := events.RestartRow{
		Namespace: "shop", Owner: deploy("api"), Pod: "api-1", Node: "node-a", Restarts: 150,
		Containers: []events.Container{ctr("app", 140, "OOMKilled", 137, at(2)), ctr("sidecar", 10, "Error", 1, at(30))},
	}
	if len(rep.Rows) != 1 || !reflect.DeepEqual(rep.Rows[0], want) {
		t.Fatalf("row\n%+v\nwant\n%+v", rep.Rows, want)
	}
	if !reflect.DeepEqual(rep.Reasons, map[string]int{"OOMKilled": 1, "Error": 1}) || rep.OffendingPods != 1 {
		t.Fatalf("reasons %v offendingPods %d", rep.Reasons, rep.OffendingPods)
	}
}

func TestBuildGroupByWorkload(t *testing.T) {
	sts := &events.Owner{Kind: "StatefulSet", Name: "db"}
	pods := []*events.PodState{
		pod("shop", "api-1", "n1", deploy("api"), ctr("app", 120, "Error", 1, at(50))),
		pod("shop", "api-2", "n2", deploy("api"), ctr("app", 130, "OOMKilled", 137, at(5)), ctr("proxy", 2, "", 0, nil)),
		pod("shop", "api-3", "n2", deploy("api"), ctr("app", 3, "", 0, nil)), // under the threshold
		pod("shop", "db-0", "n3", sts, ctr("pg", 101, "Error", 2, at(1))),
		pod("other", "api-1", "n1", deploy("api"), ctr("app", 500, "", 0, nil)), // same name, other namespace
		pod("shop", "bare", "n1", nil, ctr("c", 200, "", 0, nil)),
	}
	rep := Build(pods, nil, Options{Threshold: 100, Mode: config.ReportModeTotal, GroupBy: config.GroupByWorkload}, tick)
	if got, want := rowKeys(rep.Rows), []string{"other/Deployment/api", "shop/Deployment/api", "shop/bare", "shop/StatefulSet/db"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	api := rep.Rows[1]
	if api.Pods != 2 || api.Restarts != 252 || api.Node != "" {
		t.Fatalf("grouped row %+v: want 2 pods, 252 restarts, no single node", api)
	}
	wantC := []events.Container{ctr("app", 250, "OOMKilled", 137, at(5)), ctr("proxy", 2, "", 0, nil)}
	if !reflect.DeepEqual(api.Containers, wantC) {
		t.Fatalf("containers %+v, want %+v (summed, latest reason)", api.Containers, wantC)
	}
	if db := rep.Rows[3]; db.Pods != 1 || db.Node != "n3" {
		t.Fatalf("single-pod workload row %+v keeps its node", db)
	}
	if rep.Offenders != 4 || rep.OffendingPods != 5 || rep.PodsSeen != 6 || rep.Restarts != 500+252+200+101 {
		t.Fatalf("summary %+v", rep)
	}
}

func TestSnapshotAndDiff(t *testing.T) {
	old := Snapshot([]*events.PodState{
		pod("a", "same", "n", nil, ctr("c", 3, "", 0, nil)),
		pod("a", "grows", "n", nil, ctr("c", 3, "", 0, nil)),
		pod("a", "gone", "n", nil, ctr("c", 3, "", 0, nil)),
	}, tick)
	cur := Snapshot([]*events.PodState{
		pod("a", "same", "n", nil, ctr("c", 3, "", 0, nil)),
		pod("a", "grows", "n", nil, ctr("c", 4, "", 0, nil), ctr("d", 0, "", 0, nil)),
		pod("a", "new", "n", nil, ctr("c", 1, "", 0, nil)),
		pod("a", "never", "n", nil, ctr("c", 0, "", 0, nil)),
	}, tick.Add(time.Hour))
	if _, ok := cur.Pods["a-never-uid"]; ok {
		t.Fatal("a pod without restarts must not be stored")
	}
	put, remove := cur.Diff(old)
	wantPut := map[string]map[string]int32{"a-grows-uid": {"c": 4}, "a-new-uid": {"c": 1}}
	if !reflect.DeepEqual(put, wantPut) || !reflect.DeepEqual(remove, []string{"a-gone-uid"}) {
		t.Fatalf("put %v remove %v", put, remove)
	}
	put, remove = cur.Diff(nil)
	if len(put) != 3 || len(remove) != 0 {
		t.Fatalf("diff against nothing: put %v remove %v", put, remove)
	}
	// After a failed save of cur over old, KV may hold anything of either:
	// the next save rewrites every pod and forgets every gone one.
	next := Snapshot([]*events.PodState{pod("a", "same", "n", nil, ctr("c", 3, "", 0, nil))}, tick.Add(2*time.Hour))
	put, remove = next.Diff(Unknown(old, cur))
	sort.Strings(remove)
	if !reflect.DeepEqual(put, next.Pods) || !reflect.DeepEqual(remove, []string{"a-gone-uid", "a-grows-uid", "a-new-uid"}) {
		t.Fatalf("diff after a failed save: put %v remove %v, want every pod rewritten and every gone one removed", put, remove)
	}
}

// TestBuildCountsInitContainers: a pod in Init:CrashLoopBackOff restarts only
// its init container; it is reported, and the row says which container.
func TestBuildCountsInitContainers(t *testing.T) {
	initC := ctr("migrate", 500, "Error", 1, at(1))
	initC.Kind = events.ContainerInit
	sidecar := ctr("proxy", 2, "", 0, nil)
	sidecar.Kind = events.ContainerSidecar
	pods := []*events.PodState{pod("shop", "stuck", "n1", deploy("shop"), initC, sidecar, ctr("app", 0, "", 0, nil))}
	rep := Build(pods, nil, Options{Threshold: 100, Mode: config.ReportModeTotal, GroupBy: config.GroupByPod}, tick)
	if len(rep.Rows) != 1 || rep.Rows[0].Restarts != 502 {
		t.Fatalf("rows %+v, want the pod with 502 restarts", rep.Rows)
	}
	cs := rep.Rows[0].Containers
	if len(cs) != 2 || cs[0].Name != "migrate" || cs[0].Kind != events.ContainerInit || cs[0].Restarts != 500 ||
		cs[1].Name != "proxy" || cs[1].Kind != events.ContainerSidecar || rep.Reasons["Error"] != 1 {
		t.Fatalf("containers %+v reasons %v, want migrate (init, 500) and proxy (sidecar, 2)", cs, rep.Reasons)
	}
}

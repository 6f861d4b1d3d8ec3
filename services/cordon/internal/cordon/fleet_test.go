package cordon

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

func notReady(n *corev1.Node) {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}
}

// TestFleetsLive: the cap is counted from the API, not from a stale mirror.
// The mirror here shows every node schedulable, Ready and unmarked, and
// still holds three nodes deleted since (a larger denominator for the
// percentage cap), as a stopped watcher would leave it; the API holds the
// truth, in one LIST.
func TestFleetsLive(t *testing.T) {
	api := []*corev1.Node{
		apiNode("marked-1", ours(EffectCordon)),
		apiNode("marked-2", ours(EffectTaint)),
		apiNode("person", func(n *corev1.Node) { n.Spec.Unschedulable = true }),
		apiNode("person-unmanaged", func(n *corev1.Node) { n.Spec.Unschedulable = true; n.Labels[events.LabelDoNotCordon] = "" }),
		apiNode("notready", notReady),
		apiNode("free-1"), apiNode("free-2"), apiNode("candidate"),
	}
	var objs []runtime.Object
	var mirror staticNodes
	for _, n := range api {
		objs = append(objs, n)
		stale := apiNode(n.Name) // the mirror's stale view: an older version, no mark, no cordon
		stale.ResourceVersion = "30"
		if _, ok := n.Labels[events.LabelDoNotCordon]; ok {
			stale.Labels[events.LabelDoNotCordon] = ""
		}
		s := stateFromNode(stale, 0)
		s.Ready = "True"
		mirror = append(mirror, s)
	}
	for _, name := range []string{"gone-1", "gone-2", "gone-3"} {
		mirror = append(mirror, stateFromNode(apiNode(name), 0))
	}
	tests := []struct {
		name      string
		capCounts string
		exclude   string
		want      Fleet
	}{
		{"marks, cordons by anyone, NotReady", config.CapCountsUnavailable, "candidate", Fleet{Held: 4, Marks: 2, Managed: 7}},
		{"only opswire's marks", config.CapCountsMarks, "candidate", Fleet{Held: 2, Marks: 2, Managed: 7}},
		{"a node out of service does not count against itself", config.CapCountsUnavailable, "notready", Fleet{Held: 3, Marks: 2, Managed: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(objs...)
			p := seedPolicy("cordon")
			p.CapCounts = tc.capCounts
			ledger := NewLedger(false)
			f := NewFleets(mirror, ledger, p, client, 0)
			if got := f.Mirror(tc.exclude); got.Marks != 0 {
				t.Fatalf("the stale mirror shows marks: %+v", got)
			}
			got, err := f.Live(context.Background(), "41", tc.exclude)
			if err != nil {
				t.Fatal(err)
			}
			if got.asOf == "" {
				t.Fatal("Live does not say which resourceVersion it counted at")
			}
			if !got.listed || got.node == nil || got.node.Name != tc.exclude || got.node.UID != types.UID("uid-"+tc.exclude) {
				t.Fatalf("Live did not return the excluded node as listed: %+v", got.node)
			}
			if got.asOf, got.listed, got.node = "", false, nil; got != tc.want {
				t.Fatalf("Live = %+v, want %+v", got, tc.want)
			}
			// The marks found live are now counted on the mirror path too.
			if m := f.Mirror(tc.exclude); m.Marks != 2 {
				t.Fatalf("after Live, Mirror = %+v: live marks not learnt", m)
			}
			lists := 0
			for _, a := range client.Actions() {
				l, ok := a.(k8stesting.ListActionImpl)
				if !ok {
					continue
				}
				if lists++; l.GetListOptions().LabelSelector != "" || l.GetListOptions().FieldSelector != "" {
					t.Fatalf("LIST with selectors %+v: the fleet must come from one LIST of every node", l.GetListOptions())
				}
				if rv := l.GetListOptions().ResourceVersion; rv != "41" || l.GetListOptions().ResourceVersionMatch != "NotOlderThan" {
					t.Fatalf("LIST asked for resourceVersion %q match %q: not served from the watch cache at least as new as 41",
						rv, l.GetListOptions().ResourceVersionMatch)
				}
			}
			if lists != 1 {
				t.Fatalf("%d LISTs, want one", lists)
			}
		})
	}
	t.Run("dry run counts its simulated marks", func(t *testing.T) {
		ledger := NewLedger(true)
		ledger.Record("free-1", "uid-free-1", true)
		f := NewFleets(mirror, ledger, seedPolicy("cordon"), fake.NewClientset(objs...), 0)
		got, err := f.Live(context.Background(), "", "candidate")
		if err != nil {
			t.Fatal(err)
		}
		if got.Marks != 3 || got.Held != 5 {
			t.Fatalf("Live = %+v, want 3 marks (2 real, 1 simulated) and 5 held", got)
		}
	})
	t.Run("API failure fails closed", func(t *testing.T) {
		client := fake.NewClientset(objs...)
		client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, context.DeadlineExceeded
		})
		if _, err := NewFleets(mirror, NewLedger(false), seedPolicy("cordon"), client, 0).Live(context.Background(), "", ""); err == nil {
			t.Fatal("a failed LIST must be an error, not a count of 0")
		}
	})
}

package cordon

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A new leader's API server may have a watch cache behind the previous
// leader's last write: the cap's count is never served from a cache older
// than the term's first count, a consistent read; before that count (a term
// whose start count failed) every count is a consistent read itself.
func TestCapCountsNeverOlderThanTheTermsConsistentStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start *Fleet // the term's first count; nil: it failed
		want  string // notOlderThan of the cap's count ("" = consistent read)
	}{
		{"no start count: a consistent read", nil, ""},
		{"start count newer than the node: its version", &Fleet{listed: true, asOf: "90"}, "90"},
		{"start count older than the node: the node's", &Fleet{listed: true, asOf: "20"}, "41"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := apiNode("a")
			node.ResourceVersion = "41"
			h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{node}, pods("a", 100)...)...)
			h.act.EndTerm() // a term of its own: newHarness started one
			h.act.lastWrite = ""
			if tc.start != nil {
				h.act.StartTerm(*tc.start)
			}
			fleet := &countingFleet{f: Fleet{Managed: 10}, asOf: "95"}
			h.act.fleet = fleet
			state := mirrorOf(node, 100)
			if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
				t.Fatal(err)
			}
			if len(fleet.live) == 0 || fleet.live[0] != tc.want {
				t.Fatalf("the cap's count asked for %q; want %q", fleet.live, tc.want)
			}
		})
	}
}

// A watch cache that cannot serve NotOlderThan within its wait answers 504:
// the count is then read consistently, never taken as a smaller fleet and
// never failed while the API can answer.
func TestLiveCountReadsConsistentlyWhenTheCacheTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"504 timeout", apierrors.NewTimeoutError("Too large resource version: 217, current: 216", 1)},
		{"server timeout", apierrors.NewServerTimeout(schema.GroupResource{Resource: "nodes"}, "list", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(apiNode("a"), apiNode("b"))
			var asked []metav1.ListOptions
			client.PrependReactor("list", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
				opts := a.(k8stesting.ListActionImpl).ListOptions
				asked = append(asked, opts)
				if opts.ResourceVersionMatch == metav1.ResourceVersionMatchNotOlderThan {
					return true, nil, tc.err
				}
				return false, nil, nil
			})
			f := NewFleets(staticNodes{}, NewLedger(false), seedPolicy("cordon"), client, 0)
			got, err := f.Live(context.Background(), "217", "")
			if err != nil {
				t.Fatal(err)
			}
			if got.Managed != 2 || len(asked) != 2 || asked[1].ResourceVersion != "" {
				t.Fatalf("fleet %+v after LISTs %+v; want 2 managed nodes from a consistent second LIST", got, asked)
			}
		})
	}
}

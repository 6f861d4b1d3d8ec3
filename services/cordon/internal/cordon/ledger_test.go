package cordon

import (
	"testing"

	"github.com/opswire/opswire/shared/events"
)

func TestLedger(t *testing.T) {
	unmarked := func() *events.NodeState { return node(100) }
	markedNode := func() *events.NodeState { return node(100, withLabel(events.LabelAutoCordon, "true"), unschedulable) }
	tests := []struct {
		name     string
		simulate bool
		steps    func(l *Ledger)
		mirror   *events.NodeState
		want     bool
		wantView bool // the view shows the effect
	}{
		{"nothing recorded: the mirror", false, func(*Ledger) {}, markedNode(), true, true},
		{"own write not yet in the mirror", false, func(l *Ledger) { l.Record("n1", "u1", true) }, unmarked(), true, true},
		{"own release not yet in the mirror", false, func(l *Ledger) { l.Record("n1", "u1", false) }, markedNode(), false, false},
		{"node replaced: entry ignored", false, func(l *Ledger) { l.Record("n1", "other-uid", true) }, unmarked(), false, false},
		{"live read contradicts: corrected", false, func(l *Ledger) { l.Record("n1", "u1", true); l.Correct("n1", false) }, unmarked(), false, false},
		{"forgotten", false, func(l *Ledger) { l.Record("n1", "u1", true); l.Forget("n1") }, unmarked(), false, false},
		{"dry run keeps the simulated mark", true, func(l *Ledger) { l.Record("n1", "u1", true); l.Correct("n1", false) }, unmarked(), true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(tc.simulate)
			tc.steps(l)
			v, marked := l.View(seedPolicy("cordon"), tc.mirror)
			if marked != tc.want || v.Unschedulable != tc.wantView || hasLabel(v, events.LabelAutoCordon) != tc.want {
				t.Fatalf("View = marked %v, unschedulable %v; want %v, %v", marked, v.Unschedulable, tc.want, tc.wantView)
			}
		})
	}
	t.Run("entry dropped once the mirror agrees", func(t *testing.T) {
		l := NewLedger(false)
		l.Record("n1", "u1", true)
		if !l.Marked(markedNode()) {
			t.Fatal("mark lost")
		}
		// The mirror showed the mark; a later removal by someone else is seen.
		if l.Marked(unmarked()) {
			t.Fatal("stale ledger entry outlived the mirror's confirmation")
		}
	})
	t.Run("view never modifies the mirror's state", func(t *testing.T) {
		l := NewLedger(true)
		l.Record("n1", "u1", true)
		n := unmarked()
		_, _ = l.View(seedPolicy("taint"), n)
		if hasLabel(n, events.LabelAutoCordon) || len(n.Taints) != 0 {
			t.Fatal("View modified shared state")
		}
	})
}

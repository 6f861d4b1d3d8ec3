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
		{"live read contradicts: corrected", false, func(l *Ledger) { l.Record("n1", "u1", true); l.Learn("n1", "u1", "9", false, false) }, unmarked(), false, false},
		{"forgotten", false, func(l *Ledger) { l.Record("n1", "u1", true); l.Forget("n1") }, unmarked(), false, false},
		{"mark found live, mirror stale: counted", false, func(l *Ledger) { l.Learn("n1", "u1", "9", true, false) }, unmarked(), true, true},
		{"release found live, mirror stale", false, func(l *Ledger) { l.Learn("n1", "u1", "9", false, false) }, markedNode(), false, false},
		{"mirror newer than the entry: the mirror wins", false, func(l *Ledger) { l.RecordAt("n1", "u1", "5", true) }, unmarked(), false, false},
		{"dry run ignores what the API says", true, func(l *Ledger) { l.Record("n1", "u1", true); l.Learn("n1", "u1", "9", false, false) }, unmarked(), true, true},
		{"dry run keeps the simulated mark", true, func(l *Ledger) { l.Record("n1", "u1", true); l.Learn("n1", "u1", "9", false, false) }, unmarked(), true, true},
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
	t.Run("simulated marks: only in dry-run", func(t *testing.T) {
		l := NewLedger(true)
		l.RecordAt("a", "ua", "3", true)
		l.RecordAt("b", "ub", "3", false)
		if got := l.SimulatedMarks(); len(got) != 1 || got[0] != "a" {
			t.Fatalf("SimulatedMarks() = %v", got)
		}
		real := NewLedger(false)
		real.Record("a", "ua", true)
		if got := real.SimulatedMarks(); got != nil {
			t.Fatalf("real run: SimulatedMarks() = %v", got)
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

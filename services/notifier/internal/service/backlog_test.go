package service

import (
	"slices"
	"testing"
)

func TestSeqTracker(t *testing.T) {
	s := newSeqTracker(nil)
	check := func(what string, first, lost, from, to uint64) {
		t.Helper()
		l, f, tt := s.resolve(first)
		if l != lost || f != from || tt != to {
			t.Errorf("%s: resolve(%d) = %d [%d, %d], want %d [%d, %d]", what, first, l, f, tt, lost, from, to)
		}
	}
	s.done.add(1, 4) // the new consumer's ack floor: it starts at 5
	check("nothing delivered yet", 5, 0, 0, 0)
	for seq := uint64(5); seq <= 10; seq++ {
		s.observe(seq)
	}
	check("held messages are not lost", 8, 0, 0, 0)
	check("stuck consumer: the stream's start passed it", 14, 3, 11, 13)
	check("already counted", 14, 0, 0, 0)
	for seq := uint64(5); seq <= 10; seq++ {
		s.settle(seq)
	}
	s.observe(14)
	s.settle(14)
	s.observe(7) // a redelivery of a settled message
	check("after moving on", 15, 0, 0, 0)
	s.observe(20)
	s.settle(20)
	check("jump over messages still in the stream: another cluster's", 10, 0, 0, 0)
	s.observe(30)
	s.settle(30)
	check("jump over removed messages, both sides of a settled one", 26, 10, 15, 25)
	check("the rest of the jump", 30, 4, 26, 29)
	check("empty stream", 0, 0, 0, 0)
	if want := (seqSet{{1, 30}}); !slices.Equal(s.done, want) {
		t.Errorf("done = %v, want %v", s.done, want)
	}
}

// TestSeqTrackerAcrossTerms: what a term settled is saved and loaded by the
// next; messages dropped between terms, and held ones released at the end
// of a term after OPS dropped them, are counted by the next.
func TestSeqTrackerAcrossTerms(t *testing.T) {
	a := newSeqTracker(seqSet{{1, 100}})
	for seq := uint64(101); seq <= 120; seq++ {
		a.observe(seq)
	}
	for seq := uint64(101); seq <= 120; seq++ {
		if seq != 105 && seq != 110 { // held: grouped, retried
			a.settle(seq)
		}
	}
	// OPS drops up to 107 while 105 and 110 are held: not lost yet.
	if lost, _, _ := a.resolve(108); lost != 0 {
		t.Fatalf("held messages counted lost: %d", lost)
	}
	// The term ends: both are nak'ed; 105 is gone, 110 comes back.
	a.release()
	if lost, from, to := a.resolve(108); lost != 1 || from != 105 || to != 105 {
		t.Fatalf("released held message gone from the stream: lost %d [%d, %d], want 1 [105, 105]", lost, from, to)
	}
	saved := slices.Clone(a.done)
	if want := (seqSet{{1, 109}, {111, 120}}); !slices.Equal(saved, want) {
		t.Fatalf("saved %v, want %v", saved, want)
	}
	// No notifier while OPS drops up to 500; the next term's first message is 501.
	b := newSeqTracker(saved)
	b.observe(501)
	if lost, from, to := b.resolve(501); lost != 1+380 || from != 110 || to != 500 {
		t.Fatalf("dropped between terms: lost %d [%d, %d], want 381 [110, 500]", lost, from, to)
	}
	if lost, _, _ := b.resolve(501); lost != 0 {
		t.Fatalf("counted twice: %d", lost)
	}
}

func TestSeqSet(t *testing.T) {
	var s seqSet
	for _, r := range [][2]uint64{{5, 5}, {7, 9}, {1, 2}, {6, 6}, {20, 30}, {3, 3}, {12, 25}} {
		s.add(r[0], r[1])
	}
	if want := (seqSet{{1, 3}, {5, 9}, {12, 30}}); !slices.Equal(s, want) {
		t.Fatalf("s = %v, want %v", s, want)
	}
	for seq, want := range map[uint64]bool{0: false, 1: true, 4: false, 9: true, 10: false, 12: true, 30: true, 31: false} {
		if s.has(seq) != want {
			t.Errorf("has(%d) = %v", seq, !want)
		}
	}
	if got, want := s.holes(40), [][2]uint64{{4, 4}, {10, 11}, {31, 40}}; !slices.Equal(got, want) {
		t.Errorf("holes(40) = %v, want %v", got, want)
	}
	if got, want := s.holes(10), [][2]uint64{{4, 4}, {10, 10}}; !slices.Equal(got, want) {
		t.Errorf("holes(10) = %v, want %v", got, want)
	}
}

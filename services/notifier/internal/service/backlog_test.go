package service

import "testing"

func TestSeqTracker(t *testing.T) {
	var s seqTracker
	check := func(what string, first, lost, from, to uint64) {
		t.Helper()
		l, f, tt := s.resolve(first)
		if l != lost || f != from || tt != to {
			t.Errorf("%s: resolve(%d) = %d [%d, %d], want %d [%d, %d]", what, first, l, f, tt, lost, from, to)
		}
	}
	check("nothing delivered yet", 5, 0, 0, 0)
	for seq := uint64(5); seq <= 10; seq++ {
		s.observe(seq)
	}
	check("nothing removed beyond what was delivered", 8, 0, 0, 0)
	check("stuck consumer: the stream's start passed it", 14, 3, 11, 13)
	check("already counted", 14, 0, 0, 0)
	s.observe(14) // the consumer moves on: no jump over uncounted sequences
	check("after moving on", 14, 0, 0, 0)
	s.observe(7) // a redelivery
	s.observe(20)
	check("jump over messages still in the stream: another cluster's", 10, 0, 0, 0)
	s.observe(30)
	check("jump over removed messages", 26, 5, 21, 25)
	s.observe(40)
	check("jump partly removed", 35, 4, 31, 34)
	check("empty stream", 0, 0, 0, 0)
}

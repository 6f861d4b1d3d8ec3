package actuate

import "testing"

func TestAnnounced(t *testing.T) {
	a := NewAnnounced()
	if !a.First("n1", "skipped/cap") || a.First("n1", "skipped/cap") {
		t.Fatal("a decision must be announced exactly once")
	}
	if !a.First("n1", "failed/cordon/7") || !a.First("n2", "skipped/cap") {
		t.Fatal("other keys and objects are announced on their own")
	}
	if !a.Has("n1", "skipped/cap") || a.Has("n3", "skipped/cap") {
		t.Fatal("Has")
	}
	a.Reset("n1")
	if a.Has("n1", "failed/cordon/7") || !a.First("n1", "skipped/cap") {
		t.Fatal("after Reset the episode starts again")
	}
	if !a.Has("n2", "skipped/cap") {
		t.Fatal("Reset of one object changed another")
	}
}

package actuate

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestOnceReportsEachUIDOnceWithinItsBound(t *testing.T) {
	o := NewOnce(2)
	for _, step := range []struct {
		uid   types.UID
		first bool
	}{
		{"a", true}, {"a", false}, {"b", true}, {"b", false},
		{"c", true},  // past the bound: starts over with c
		{"a", true},  // forgotten
		{"c", false}, // kept
		{"", true}, {"", true},
	} {
		if got := o.First(step.uid); got != step.first {
			t.Fatalf("First(%q) = %v, want %v", step.uid, got, step.first)
		}
	}
}

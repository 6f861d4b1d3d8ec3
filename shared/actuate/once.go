package actuate

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// Once remembers the objects a condition was reported for, so that a
// recovery that lists the same Event again on every attempt logs and counts
// it once. It holds at most max UIDs: past that it starts over, so a flood
// of forged Events is reported again rather than held without bound.
type Once struct {
	mu   sync.Mutex
	max  int
	seen map[types.UID]struct{}
}

// NewOnce remembers up to max UIDs.
func NewOnce(max int) *Once { return &Once{max: max} }

// First reports whether uid is seen for the first time, and remembers it.
// An empty UID is always first (nothing identifies it).
func (o *Once) First(uid types.UID) bool {
	if uid == "" {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[uid]; ok {
		return false
	}
	if o.seen == nil || len(o.seen) >= o.max {
		o.seen = make(map[types.UID]struct{})
	}
	o.seen[uid] = struct{}{}
	return true
}

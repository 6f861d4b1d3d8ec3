package cleanup

import (
	"sync"
	"time"
)

// removedTTL is how long the actuator remembers a pod UID it knows to be
// gone from the API server. The mirror's last messages about such a pod
// arrive within moments (the API server's own deletion update, written just
// before it removes a pod with grace 0, and a key the queue held while the
// deletion ran); past this age a late one costs one re-read again, nothing
// more.
const removedTTL = 2 * time.Minute

// removedUIDs is the set of pod UIDs this leader saw leave the API server:
// its own removal was answered with success, or settled in doubt as having
// happened, or a write or a live re-read answered 404 (or the re-read found
// another pod under the name). A UID is never reused, so any later decision
// the mirror gives about such a pod is about a pod that no longer exists: the
// actuator drops it without a re-read.
//
// The set is two generations of at most ttl each: memory bounded by the
// removals of two ttl periods, whatever the mirror does. A UID is kept when
// the mirror removes the pod (Actuator.Forget): a worker may be visiting the
// pod's key at that moment, from the mirror's state of just before.
type removedUIDs struct {
	mu        sync.Mutex
	ttl       time.Duration
	cur, prev map[string]struct{}
	since     time.Time // when cur was started
}

func newRemovedUIDs(ttl time.Duration) *removedUIDs {
	return &removedUIDs{ttl: ttl, cur: map[string]struct{}{}, prev: map[string]struct{}{}}
}

// rotate starts a new generation every ttl (generations start on the ttl
// grid, however sparse the calls): a UID lives between ttl and 2×ttl. The
// caller holds mu.
func (r *removedUIDs) rotate(now time.Time) {
	switch {
	case r.since.IsZero():
		r.since = now
	case now.Sub(r.since) >= 2*r.ttl:
		r.prev, r.cur, r.since = map[string]struct{}{}, map[string]struct{}{}, now
	case now.Sub(r.since) >= r.ttl:
		r.prev, r.cur, r.since = r.cur, map[string]struct{}{}, r.since.Add(r.ttl)
	}
}

// add records uid as gone at now.
func (r *removedUIDs) add(uid string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	r.cur[uid] = struct{}{}
}

// has reports whether uid was recorded gone (and has not expired by now).
func (r *removedUIDs) has(uid string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	_, inCur := r.cur[uid]
	_, inPrev := r.prev[uid]
	return inCur || inPrev
}

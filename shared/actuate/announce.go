package actuate

import "sync"

// Announced remembers, per object, the decisions already announced (published
// to OPS, recorded as an Event), so that a condition which persists across
// reconcile ticks (a refusal, a skip, a failure of one object version) is
// announced once rather than on every tick. The key names the decision, e.g.
// "skipped/cap-reached" or "failed/cordon/<resourceVersion>".
//
// The set lives for one leadership term. A new leader announces again what is
// still true; the deterministic Nats-Msg-Id of the message lets the stream
// drop the repeat within its duplicate window.
type Announced struct {
	mu sync.Mutex
	m  map[string]map[string]struct{}
}

// NewAnnounced returns an empty set.
func NewAnnounced() *Announced { return &Announced{m: map[string]map[string]struct{}{}} }

// First reports whether key was not yet announced for obj, and records it.
func (a *Announced) First(obj, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	set := a.m[obj]
	if _, ok := set[key]; ok {
		return false
	}
	if set == nil {
		set = map[string]struct{}{}
		a.m[obj] = set
	}
	set[key] = struct{}{}
	return true
}

// Has reports whether key was announced for obj, without recording it.
func (a *Announced) Has(obj, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.m[obj][key]
	return ok
}

// Reset forgets what was announced for obj: the episode ended (the action
// succeeded, nothing is wanted any more) or the object is gone.
func (a *Announced) Reset(obj string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, obj)
}

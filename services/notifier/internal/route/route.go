// Package route decides which receivers an OPS event goes to. Routes are
// tried in order and the first match wins unless it sets continue (as in
// Alertmanager); what matches no route goes to the default receivers.
package route

import (
	"strings"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/config"
)

// DefaultRoute is the name of the route of the default receivers (the
// config refuses it for another route).
const DefaultRoute = config.DefaultRouteName

// Table is the compiled routing configuration.
type Table struct {
	routes   []config.Route
	fallback *config.Route
}

// New compiles routes; defaults (may be empty) catch what no route matched,
// grouped with the given timings.
func New(routes []config.Route, defaults []string, groupWait, groupInterval config.Duration) *Table {
	t := &Table{routes: routes}
	if len(defaults) > 0 {
		t.fallback = &config.Route{Name: DefaultRoute, Receivers: defaults, GroupWait: groupWait, GroupInterval: groupInterval}
	}
	return t
}

// Match returns the routes an item goes to, in order; empty means dropped.
func (t *Table) Match(it *notify.Item) []*config.Route {
	var out []*config.Route
	for i := range t.routes {
		r := &t.routes[i]
		if !matches(r, it) {
			continue
		}
		out = append(out, r)
		if !r.Continue {
			return out
		}
	}
	if len(out) == 0 && t.fallback != nil {
		out = append(out, t.fallback)
	}
	return out
}

func matches(r *config.Route, it *notify.Item) bool {
	if len(r.Subjects) > 0 && !anySubject(r.Subjects, it.Subject) {
		return false
	}
	if len(r.Severities) > 0 && !contains(r.Severities, string(it.Severity)) {
		return false
	}
	if len(r.Clusters) > 0 && !contains(r.Clusters, it.Cluster) {
		return false
	}
	if it.Namespace == "" {
		return len(r.Namespaces.Include) == 0
	}
	return r.Namespaces.Allows(it.Namespace)
}

func anySubject(patterns []string, subj string) bool {
	for _, p := range patterns {
		if SubjectMatches(p, subj) {
			return true
		}
	}
	return false
}

// SubjectMatches applies NATS wildcard rules: '*' matches one token, a final
// '>' one or more.
func SubjectMatches(pattern, subj string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subj, ".")
	for i, p := range pt {
		if p == ">" {
			return i == len(pt)-1 && len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// ByName returns the route of that name (the default route included), or
// nil: dead letters name the route they were sent on.
func (t *Table) ByName(name string) *config.Route {
	for i := range t.routes {
		if t.routes[i].Name == name {
			return &t.routes[i]
		}
	}
	if t.fallback != nil && t.fallback.Name == name {
		return t.fallback
	}
	return nil
}

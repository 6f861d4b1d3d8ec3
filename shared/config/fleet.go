package config

import (
	"strings"
	"unicode/utf8"
)

// DefaultOpsStream is the stream a notifier reads unless notifier.stream
// names another (a hub's fleet-wide stream).
const DefaultOpsStream = "OPS"

// AllClusters in notifier.clusters reads every cluster of the stream.
const AllClusters = "*"

// Fleet reports whether the notifier reads a fleet (notifier.clusters is
// set) rather than only its own cluster.
func (n Notifier) Fleet() bool { return len(n.Clusters) > 0 }

// ReadsCluster reports whether a fleet notifier's clusters include c
// (always true for "*").
func (n Notifier) ReadsCluster(c string) bool {
	for _, x := range n.Clusters {
		if x == AllClusters || x == c {
			return true
		}
	}
	return false
}

// validateFleet checks notifier.stream and notifier.clusters.
func (n *Notifier) validateFleet(p string, errs *Errors) {
	switch {
	case n.Stream == "":
		errs.add(join(p, "stream"), "must not be empty (default %s)", DefaultOpsStream)
	case strings.ContainsAny(n.Stream, ".*> \t/\\"):
		errs.add(join(p, "stream"), "%q is not a JetStream stream name (no '.', '*', '>', '/', '\\' or spaces)", n.Stream)
	}
	seen := map[string]bool{}
	for i, c := range n.Clusters {
		cp := p + ".clusters[" + itoa(i) + "]"
		switch {
		case c == AllClusters && len(n.Clusters) > 1:
			errs.add(cp, "%q (every cluster) must be the only entry", AllClusters)
		case c == AllClusters:
		case clusterTokenProblem(c) != "":
			errs.add(cp, "%q %s", c, clusterTokenProblem(c))
		case seen[c]:
			errs.add(cp, "duplicate cluster %q", c)
		}
		seen[c] = true
	}
}

// validateRouteClusters checks routes[].clusters: cluster names, and on a
// fleet notifier with a list of clusters, only clusters it reads (another
// would never match). A notifier of one cluster accepts any name: one
// configuration file may serve many clusters.
func (n *Notifier) validateRouteClusters(p string, clusters []string, errs *Errors) {
	seen := map[string]bool{}
	for i, c := range clusters {
		cp := p + "[" + itoa(i) + "]"
		switch {
		case c == AllClusters:
			errs.add(cp, "%q is not a cluster; leave clusters empty to match every cluster", c)
		case clusterTokenProblem(c) != "":
			errs.add(cp, "%q %s", c, clusterTokenProblem(c))
		case seen[c]:
			errs.add(cp, "duplicate cluster %q", c)
		case n.Fleet() && !n.ReadsCluster(c):
			errs.add(cp, "%q never matches: notifier.clusters reads only %s", c, strings.Join(n.Clusters, ", "))
		}
		seen[c] = true
	}
}

// clusterTokenProblem says why c cannot be a <cluster> subject token, or "".
// Any other name is accepted: subjects carry it as it is, and KV keys take
// it through ClusterKey.
func clusterTokenProblem(c string) string {
	switch {
	case c == "":
		return "must not be empty"
	case strings.ContainsAny(c, ".*> \t\r\n\f\x00") || !utf8.ValidString(c):
		return "must be one NATS subject token: UTF-8 without '.', '*', '>', whitespace or NUL " +
			"(any other character is fine, e.g. ':', '/', '=' or 北京)"
	}
	return ""
}

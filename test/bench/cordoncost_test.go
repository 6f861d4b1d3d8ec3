//go:build bench

package bench

import (
	"fmt"
	"testing"
)

// cordonCost is what opswire-cordon sent the API during the cordon phase,
// counted at the proxy (leases apart), split between the actions (the
// decisions that wrote) and the re-looks (the decisions that read and wrote
// nothing: the re-verification dropped the action, or the patch's
// precondition failed and the node is looked at again).
type cordonCost struct {
	Requests int // every request
	Reads    int // node and pod GETs and LISTs, every page
	// Decisions is the number of re-verifications: each one recounts the
	// node's pods, with exactly one first page of a pod LIST.
	Decisions int
	Patches   int // node PATCHes sent
	Accepted  int // node PATCHes the API server accepted: the actions
}

// cordonCostFrom reads the figures from the proxy's counts of a phase.
func cordonCostFrom(counts, accepted, continued map[request]int) cordonCost {
	const agent = "opswire-cordon"
	podList := request{agent, "LIST", "pods"}
	nodePatch := request{agent, "PATCH", "nodes"}
	return cordonCost{
		Requests: sum(counts, func(r request) bool { return r.Agent == agent && r.Resource != "leases" }),
		Reads: sum(counts, func(r request) bool {
			return r.Agent == agent && (r.Verb == "GET" || r.Verb == "LIST") && (r.Resource == "nodes" || r.Resource == "pods")
		}),
		Decisions: counts[podList] - continued[podList],
		Patches:   counts[nodePatch],
		Accepted:  accepted[nodePatch],
	}
}

// Relooks is the number of decisions that wrote nothing.
func (c cordonCost) Relooks() int { return max(c.Decisions-c.Accepted, 0) }

// ReadsPerDecision is the mean number of reads of one re-verification (2:
// the node, from the cap's LIST or a GET, and one page of pods).
func (c cordonCost) ReadsPerDecision() float64 {
	if c.Decisions == 0 {
		return 0
	}
	return float64(c.Reads) / float64(c.Decisions)
}

// RelookRequests is what the re-looks cost: their reads (at the mean reads
// per decision: every decision reads the same way, and the count of reads
// per decision is reported beside it) and the patches the API server refused.
func (c cordonCost) RelookRequests() float64 {
	return float64(c.Relooks())*c.ReadsPerDecision() + float64(c.Patches-c.Accepted)
}

// PerAction is the requests of the actions per action: everything else than
// the re-looks' requests (reads, the accepted patch, every Event), over the
// accepted patches.
func (c cordonCost) PerAction() float64 {
	if c.Accepted == 0 {
		return 0
	}
	return (float64(c.Requests) - c.RelookRequests()) / float64(c.Accepted)
}

func (c cordonCost) String() string {
	return fmt.Sprintf("%d requests: %d actions at %.4f requests each, %d re-looks costing %.1f requests (%.3f reads per decision, %d patches refused)",
		c.Requests, c.Accepted, c.PerAction(), c.Relooks(), c.RelookRequests(), c.ReadsPerDecision(), c.Patches-c.Accepted)
}

func TestCordonCost(t *testing.T) {
	const a = "opswire-cordon"
	for _, tc := range []struct {
		name                string
		counts              map[request]int
		accepted, continued map[request]int
		perAction           float64
		relooks             int
		relookRequests      float64
	}{
		{
			name: "400 actions, no re-look",
			counts: map[request]int{{a, "LIST", "nodes"}: 200, {a, "GET", "nodes"}: 200, {a, "LIST", "pods"}: 400,
				{a, "PATCH", "nodes"}: 400, {a, "CREATE", "events"}: 50, {a, "PATCH", "events"}: 350, {a, "UPDATE", "leases"}: 30},
			accepted:  map[request]int{{a, "PATCH", "nodes"}: 400},
			perAction: 4, relooks: 0, relookRequests: 0,
		},
		{
			name: "one re-look of two reads is its own figure, not in the actions'",
			counts: map[request]int{{a, "LIST", "nodes"}: 201, {a, "GET", "nodes"}: 200, {a, "LIST", "pods"}: 401,
				{a, "PATCH", "nodes"}: 400, {a, "PATCH", "events"}: 400},
			accepted:  map[request]int{{a, "PATCH", "nodes"}: 400},
			perAction: 4, relooks: 1, relookRequests: 2,
		},
		{
			name: "a patch refused by its precondition: the re-look's patch and the new look's reads",
			counts: map[request]int{{a, "LIST", "nodes"}: 201, {a, "GET", "nodes"}: 200, {a, "LIST", "pods"}: 401,
				{a, "PATCH", "nodes"}: 401, {a, "PATCH", "events"}: 400},
			accepted:  map[request]int{{a, "PATCH", "nodes"}: 400},
			perAction: 4, relooks: 1, relookRequests: 3,
		},
		{
			name: "a missing Event shows below 4",
			counts: map[request]int{{a, "LIST", "nodes"}: 200, {a, "GET", "nodes"}: 200, {a, "LIST", "pods"}: 400,
				{a, "PATCH", "nodes"}: 400, {a, "PATCH", "events"}: 399},
			accepted:  map[request]int{{a, "PATCH", "nodes"}: 400},
			perAction: 3.9975, relooks: 0, relookRequests: 0,
		},
		{
			name:      "a second page of pods is a read of its action, not a decision",
			counts:    map[request]int{{a, "LIST", "nodes"}: 2, {a, "LIST", "pods"}: 3, {a, "PATCH", "nodes"}: 2, {a, "CREATE", "events"}: 2},
			accepted:  map[request]int{{a, "PATCH", "nodes"}: 2},
			continued: map[request]int{{a, "LIST", "pods"}: 1},
			perAction: 4.5, relooks: 0, relookRequests: 0,
		},
		{
			name: "another agent's requests are not counted",
			counts: map[request]int{{a, "LIST", "nodes"}: 1, {a, "LIST", "pods"}: 1, {a, "PATCH", "nodes"}: 1, {a, "CREATE", "events"}: 1,
				{"opswire-cleanup", "GET", "pods"}: 9},
			accepted:  map[request]int{{a, "PATCH", "nodes"}: 1},
			perAction: 4, relooks: 0, relookRequests: 0,
		},
		{
			name:    "no action: nothing to divide",
			counts:  map[request]int{{a, "LIST", "nodes"}: 1, {a, "LIST", "pods"}: 1},
			relooks: 1, relookRequests: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cordonCostFrom(tc.counts, tc.accepted, tc.continued)
			if got := c.PerAction(); got < tc.perAction-1e-9 || got > tc.perAction+1e-9 {
				t.Errorf("per action %v, want %v (%s)", got, tc.perAction, c)
			}
			if c.Relooks() != tc.relooks || c.RelookRequests() != tc.relookRequests {
				t.Errorf("re-looks %d costing %v, want %d costing %v (%s)", c.Relooks(), c.RelookRequests(), tc.relooks, tc.relookRequests, c)
			}
		})
	}
}

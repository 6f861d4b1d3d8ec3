package cordon

// MirrorFleet counts, for the blast-radius cap, the nodes opswire holds
// (including marks the mirror has not shown yet, from the ledger) and the
// managed nodes, on the mirror's state. Both the controller and the actuator
// read it; neither needs the other to build it.
type MirrorFleet struct {
	nodes  NodeSource
	policy Policy
	ledger *Ledger
}

// NewMirrorFleet counts on nodes with the policy and the ledger's marks.
func NewMirrorFleet(nodes NodeSource, policy Policy, ledger *Ledger) MirrorFleet {
	return MirrorFleet{nodes: nodes, policy: policy, ledger: ledger}
}

// Fleet implements FleetCounter.
func (f MirrorFleet) Fleet() Fleet {
	var out Fleet
	for _, n := range f.nodes.Nodes() {
		if f.ledger.Marked(n) {
			out.Held++
		}
		if f.policy.Managed(n) {
			out.Managed++
		}
	}
	return out
}

var _ FleetCounter = MirrorFleet{}

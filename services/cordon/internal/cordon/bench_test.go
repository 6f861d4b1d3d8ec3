package cordon

import (
	"fmt"
	"testing"

	"github.com/opswire/opswire/shared/events"
)

// staticNodes is a NodeSource over a fixed slice.
type staticNodes []*events.NodeState

func (s staticNodes) Node(name string) (*events.NodeState, bool) {
	for _, n := range s {
		if n.Name == name {
			return n, true
		}
	}
	return nil, false
}
func (s staticNodes) Nodes() []*events.NodeState { return s }

func fleetOf(size int) staticNodes {
	nodes := make(staticNodes, size)
	for i := range nodes {
		nodes[i] = &events.NodeState{Name: fmt.Sprintf("node-%d", i), UID: fmt.Sprint(i), Pods: i % 120, AllocatablePods: 110,
			Labels: map[string]string{"kubernetes.io/hostname": fmt.Sprint(i), "pool": "web"}}
	}
	return nodes
}

// BenchmarkEvaluate is the per-node cost of a decision on the mirror.
func BenchmarkEvaluate(b *testing.B) {
	p := seedPolicy("cordon")
	nodes := fleetOf(1000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		n := nodes[i%len(nodes)]
		_ = Evaluate(p, n, false)
	}
}

// BenchmarkFleet5000 is the cost of counting the fleet for the cap at the
// Kubernetes limit of 5,000 nodes; it runs once per wanted cordon and per tick.
func BenchmarkFleet5000(b *testing.B) {
	c := NewFleets(fleetOf(5000), NewLedger(false), seedPolicy("cordon"), nil, 0)
	b.ReportAllocs()
	for b.Loop() {
		_ = c.Mirror("")
	}
}

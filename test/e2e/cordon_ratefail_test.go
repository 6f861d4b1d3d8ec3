package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// TestCordonRateLimitNATSOutageFailover: two actions per 20 s, six nodes
// over maxPods. The leader cordons two; NATS stops; when the window frees the
// leader cordons two more during the outage (their intents are not stored in
// time, their outcomes wait in its in-memory backlog) and is SIGKILLed before
// NATS is back. OPS holds nothing of those two cordons: only the API does
// (the nodes' marks). The standby takes over and counts them from the API: no
// cordon until they leave the window (counted at the API: the marked nodes
// and their marks' times), and their outcome audits, rebuilt from the marks
// with the ids the lost ones had, reach OPS, once each (a plain subscription
// sees repeats the stream would drop).
func TestCordonRateLimitNATSOutageFailover(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	const nodes, perWindow, window = 6, 2, 20 * time.Second
	for i := range nodes {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("rf-%d", i), nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", fmt.Sprintf("  maxCordonedPercent: 100\n  maxActionsPerMinute: %d\n  rateWindow: %v\n", perWindow, window))+
		"nats:\n  duplicates: 10s\nsendReport:\n  enable: false\n")
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	kubeconfig := cordonRBAC(t, cp, "default")
	replicas, first, second := cordonPair(t, cp, n, cfg, kubeconfig)
	for i := range nodes {
		cordonFill(t, c, fmt.Sprintf("rf-%d", i), 0, 5)
	}
	isCordon := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cordon.cordoned.") }
	harness.Eventually(t, 15*time.Second, "the first two cordons in OPS", func() bool { return ops.Count(isCordon) == perWindow })
	// The leader's mirror holds the other nodes over maxPods (it refuses
	// them for the rate limit) before NATS goes.
	harness.Eventually(t, 10*time.Second, "rate-limited refusals", func() bool {
		return replicas[first].Metric(`opswire_cordon_refusals_total{reason="rate-limited"}`) > 0
	})
	before := cordonMarkTimes(t, c)
	n.Stop()
	harness.Eventually(t, window+15*time.Second, "two more cordons during the outage", func() bool {
		return len(cordonMarkTimes(t, c)) == 2*perWindow
	})
	replicas[first].Kill()
	var outage []time.Time
	for name, at := range cordonMarkTimes(t, c) {
		if _, ok := before[name]; !ok {
			outage = append(outage, at)
		}
	}
	if len(outage) != perWindow {
		t.Fatalf("%d cordons during the outage, want %d", len(outage), perWindow)
	}
	earliest := outage[0]
	if outage[1].Before(earliest) {
		earliest = outage[1]
	}
	n.Restart(t)
	var pubMu sync.Mutex
	published := 0
	sub, err := n.Conn.Subscribe("ops.e2e.cordon.cordoned.>", func(*nats.Msg) {
		pubMu.Lock()
		published++
		pubMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	after := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	harness.Eventually(t, 30*time.Second, "the standby leads", func() bool { return replicas[second].Metric("opswire_leader") == 1 })
	// Until the outage cordons leave the window (a margin of 1 s for the
	// clocks): no cordon beyond the four.
	harness.Never(t, time.Until(earliest.Add(window-time.Second)), "a cordon inside the outage cordons' window", func() bool {
		return len(cordonMarkTimes(t, c)) > 2*perWindow
	})
	// The outage cordons' audits: in OPS, once each, with the ids the lost
	// ones had (cordon/<uid>/cordoned/<rv the cordon was decided on>).
	marks := cordonMarkTimes(t, c)
	harness.Eventually(t, 10*time.Second, "an outcome in OPS for every mark", func() bool {
		return after.Count(isCordon) >= len(marks)
	})
	ids := map[string]int{}
	for _, m := range after.All() {
		if !isCordon(m) {
			continue
		}
		d := cordonDecision(t, m)
		node, err := c.CoreV1().Nodes().Get(context.Background(), d.Node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "cordon/" + string(node.UID) + "/cordoned/" + d.ResourceVersion; m.ID != want {
			t.Fatalf("outcome of %s has id %s, want %s", d.Node, m.ID, want)
		}
		ids[d.Node]++
	}
	for name := range marks {
		if ids[name] != 1 {
			t.Fatalf("node %s is marked; %d cordoned outcomes in OPS (%v)", name, ids[name], ids)
		}
	}
	pubMu.Lock()
	got := published
	pubMu.Unlock()
	if got != perWindow {
		t.Fatalf("%d cordoned outcomes published after the restart, want the %d rebuilt ones once each", got, perWindow)
	}
	if v := replicas[second].Metric(`opswire_intents_total{result="rebuilt"}`); v != perWindow {
		t.Fatalf("the standby rebuilt %v outcomes, want %d", v, perWindow)
	}
	// Once the window moved on, the standby cordons again.
	harness.Eventually(t, 15*time.Second, "the next cordons once the window moved", func() bool {
		return len(cordonMarkTimes(t, c)) > 2*perWindow
	})
	if got := len(cordonMarkTimes(t, c)); got > 3*perWindow {
		t.Fatalf("%d nodes cordoned, more than %d per window three times", got, perWindow)
	}
}

// TestCordonUncordonNATSOutageFailover: the same for releases, which remove
// the mark: two actions per 20 s. The leader cordons ua-0 and ua-1, which are
// then drained to minPods (the window is full: the releases wait); NATS
// stops; when the window frees the leader uncordons both during the outage
// and is SIGKILLed before NATS is back. Only their Kubernetes Events remain.
// The standby counts them from the Events: ua-2 and ua-3, filled once NATS
// is back, are cordoned only when the uncordons leave the window (counted at
// the API), and the uncordons' audits, rebuilt with the ids the lost ones had,
// reach OPS once each (plain subscription).
func TestCordonUncordonNATSOutageFailover(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	const perWindow, window = 2, 20 * time.Second
	names := []string{"ua-0", "ua-1", "ua-2", "ua-3"}
	for _, name := range names {
		harness.CreateNode(t, c, harness.Node(name, nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", fmt.Sprintf("  maxCordonedPercent: 100\n  maxActionsPerMinute: %d\n  rateWindow: %v\n", perWindow, window))+
		"nats:\n  duplicates: 10s\nsendReport:\n  enable: false\n")
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	kubeconfig := cordonRBAC(t, cp, "default")
	replicas, first, second := cordonPair(t, cp, n, cfg, kubeconfig)
	for _, name := range names[:2] {
		cordonFill(t, c, name, 0, 5)
	}
	isCordon := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cordon.cordoned.") }
	harness.Eventually(t, 15*time.Second, "the two cordons in OPS", func() bool { return ops.Count(isCordon) == perWindow })
	for _, name := range names[:2] {
		cordonDrain(t, c, name, 2, 5)
	}
	harness.Eventually(t, 10*time.Second, "KUBE shows both drained to minPods", func() bool {
		for _, name := range names[:2] {
			if s := lastNode(t, n.JS, "kube.e2e.node."+name); s == nil || s.Pods != 2 {
				return false
			}
		}
		return true
	})
	harness.Eventually(t, 10*time.Second, "releases held by the rate limit", func() bool {
		return replicas[first].Metric(`opswire_cordon_refusals_total{reason="rate-limited"}`) > 0
	})
	n.Stop()
	harness.Eventually(t, window+15*time.Second, "both uncordoned during the outage, their Events recorded", func() bool {
		return len(cordonMarkTimes(t, c)) == 0 && cordonEventCount(t, c, names[0], "OpswireUncordoned") == 1 &&
			cordonEventCount(t, c, names[1], "OpswireUncordoned") == 1
	})
	replicas[first].Kill()
	var earliest time.Time
	for _, name := range names[:2] {
		for _, ev := range cordonEvents(t, c, name, "OpswireUncordoned") {
			if at := ev.LastTimestamp.Time; earliest.IsZero() || at.Before(earliest) {
				earliest = at // whole seconds, rounded down: never later than the uncordon
			}
		}
	}
	n.Restart(t)
	var pubMu sync.Mutex
	published := 0
	sub, err := n.Conn.Subscribe("ops.e2e.cordon.uncordoned.>", func(*nats.Msg) {
		pubMu.Lock()
		published++
		pubMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	after := harness.CollectOps(t, n, "ops.e2e.cordon.uncordoned.>")
	for _, name := range names[2:] {
		cordonFill(t, c, name, 0, 5)
	}
	harness.Never(t, time.Until(earliest.Add(window-time.Second)), "a cordon inside the outage uncordons' window", func() bool {
		return len(cordonMarkTimes(t, c)) > 0
	})
	harness.Eventually(t, 20*time.Second, "ua-2 and ua-3 cordoned once the window moved", func() bool {
		return len(cordonMarkTimes(t, c)) == 2
	})
	harness.Eventually(t, 10*time.Second, "both uncordons in OPS", func() bool { return after.Count(func(harness.Msg) bool { return true }) >= 2 })
	ids := map[string]int{}
	for _, m := range after.All() {
		d := cordonDecision(t, m)
		node := harness.GetNode(t, c, d.Node)
		if want := "cordon/" + string(node.UID) + "/uncordoned/" + d.ResourceVersion; m.ID != want || d.Verb != "uncordoned" {
			t.Fatalf("outcome of %s: id %s verb %s, want %s", d.Node, m.ID, d.Verb, want)
		}
		ids[d.Node]++
	}
	if ids[names[0]] != 1 || ids[names[1]] != 1 || len(ids) != 2 {
		t.Fatalf("uncordoned outcomes in OPS by node: %v, want ua-0 and ua-1 once each", ids)
	}
	pubMu.Lock()
	got := published
	pubMu.Unlock()
	if got != 2 {
		t.Fatalf("%d uncordoned outcomes published after the restart, want 2", got)
	}
	if v := replicas[second].Metric(`opswire_intents_total{result="rebuilt"}`); v != 2 {
		t.Fatalf("the standby rebuilt %v outcomes, want 2", v)
	}
}

// cordonMarkTimes returns, by node, the time of opswire's mark on each node
// carrying it in the API.
func cordonMarkTimes(t *testing.T, c kubernetes.Interface) map[string]time.Time {
	t.Helper()
	list, err := c.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for i := range list.Items {
		n := &list.Items[i]
		if !cordonMarked(n) {
			continue
		}
		var m struct {
			Time time.Time `json:"time"`
		}
		if err := json.Unmarshal([]byte(n.Annotations[events.AnnotationAutoCordon]), &m); err != nil {
			t.Fatalf("node %s: mark %q: %v", n.Name, n.Annotations[events.AnnotationAutoCordon], err)
		}
		out[n.Name] = m.Time
	}
	return out
}

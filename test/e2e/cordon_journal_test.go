package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// acceptedNodePatch: PATCH /api/v1/nodes/<name>, answered 2xx; it returns
// the node's name.
func acceptedNodePatch(r harness.APIRequest) (string, bool) {
	parts := strings.Split(strings.Trim(r.Path, "/"), "/")
	if r.Method != http.MethodPatch || len(parts) != 4 || parts[2] != "nodes" || r.Status < 200 || r.Status >= 300 {
		return "", false
	}
	return parts[3], true
}

// nodePatches counts the node PATCHes the API server accepted, at the proxy.
func nodePatches(px *harness.APIProxy, node string) int {
	return px.Count(func(r harness.APIRequest) bool { n, ok := acceptedNodePatch(r); return ok && n == node })
}

// TestCordonKillAfterPatch: two replicas, at most 2 actions per 15 s. The
// leader is SIGKILLed by the proxy right after the API accepted its cordon
// patch of kp-0, before the answer reaches it: the cordon happened, and its
// outcome audit can only come from the intent stored before the patch. The
// standby takes over, finds the intent without its outcome and the node
// marked by that very write, and publishes the carried outcome: stored once
// in OPS and published once (counted on a plain subscription, which sees a
// repeat the stream would drop), the node patched once (counted at the API).
// Its window is seeded with that cordon: of kp-1 and kp-2, one is cordoned at
// once and the other only when kp-0's cordon leaves the window.
func TestCordonKillAfterPatch(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	const perWindow, window = 2, 15 * time.Second
	for i := range 3 {
		harness.CreateNode(t, c, harness.Node(fmt.Sprintf("kp-%d", i), nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("500ms", fmt.Sprintf("  maxCordonedPercent: 100\n  maxActionsPerMinute: %d\n  rateWindow: %v\n", perWindow, window)))
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.cordon.>")
	var pubMu sync.Mutex
	published := map[string]int{}
	sub, err := n.Conn.Subscribe("ops.e2e.cordon.cordoned.>", func(m *nats.Msg) {
		pubMu.Lock()
		published[m.Subject]++
		pubMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	pubCount := func(subj string) int {
		pubMu.Lock()
		defer pubMu.Unlock()
		return published[subj]
	}
	proxy := harness.StartAPIProxy(t, cp)
	kc := proxy.Kubeconfig(t, cordonRBAC(t, cp, "default"))
	replicas, first, second := cordonPair(t, cp, n, cfg, kc)
	killed := make(chan int, 1)
	var once sync.Once
	proxy.OnAnswer(func(r harness.APIRequest) {
		if node, ok := acceptedNodePatch(r); !ok || node != "kp-0" {
			return
		}
		once.Do(func() {
			replicas[first].Kill()
			killed <- pubCount("ops.e2e.cordon.cordoned.kp-0")
		})
	})
	cordonFill(t, c, "kp-0", 0, 5)
	var atKill int
	select {
	case atKill = <-killed:
	case <-time.After(30 * time.Second):
		t.Fatal("no cordon patch of kp-0 within 30s")
	}
	killedAt := time.Now()
	if atKill != 0 {
		t.Fatalf("kp-0's outcome published %d times before its answer reached the leader", atKill)
	}
	intentMsg := ops.WaitFor(t, 5*time.Second, "kp-0's intent", harness.Subject("ops.e2e.cordon.intent.kp-0"))
	intentStored := opsStoredTime(t, n, intentMsg.Seq)
	var intent events.Intent
	if err := json.Unmarshal(intentMsg.Data, &intent); err != nil {
		t.Fatal(err)
	}

	next := replicas[second]
	harness.Eventually(t, 20*time.Second, "the new leader seeded its window", func() bool {
		return next.Metric("opswire_rate_window_seeded_actions") == 1
	})
	t.Logf("leader %s killed after the API accepted kp-0's cordon; %s seeded %v after the kill", first, second,
		time.Since(killedAt).Round(time.Millisecond))
	if v := next.Metric(`opswire_intents_total{result="completed"}`); v != 1 {
		t.Fatalf("new leader completed %v outcomes from intents, want 1:\n%s", v, ops.Describe())
	}
	out := ops.WaitFor(t, 10*time.Second, "kp-0's outcome", harness.Subject("ops.e2e.cordon.cordoned.kp-0"))
	if out.ID != intent.Outcome.ID || string(out.Data) != string(intent.Outcome.Data) {
		t.Fatalf("outcome %s %s, the intent carries %s %s", out.ID, out.Data, intent.Outcome.ID, intent.Outcome.Data)
	}
	if d := cordonDecision(t, out); d.Replica != first || d.Node != "kp-0" {
		t.Fatalf("outcome %+v, want the dead leader's decision", d)
	}

	// The window holds kp-0's cordon: one more now, the next only after it.
	cordonFill(t, c, "kp-1", 0, 5)
	cordonFill(t, c, "kp-2", 0, 5)
	harness.Eventually(t, 10*time.Second, "one more cordon", func() bool { return cordonCountMarked(t, c) == 2 })
	harness.Never(t, time.Until(intentStored.Add(window-time.Second)), "a third cordon within kp-0's window", func() bool {
		return cordonCountMarked(t, c) > perWindow
	})
	harness.Eventually(t, 10*time.Second, "the third cordon once kp-0's left the window", func() bool {
		return cordonCountMarked(t, c) == 3
	})

	// Exactly once, at the source: one accepted patch per node, one publish
	// and one stored outcome per node.
	harness.Eventually(t, 10*time.Second, "every outcome in OPS", func() bool {
		return ops.Count(func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cordon.cordoned.") }) == 3
	})
	for i := range 3 {
		node := fmt.Sprintf("kp-%d", i)
		subj := "ops.e2e.cordon.cordoned." + node
		if got := nodePatches(proxy, node); got != 1 {
			t.Fatalf("%s patched %d times, want 1", node, got)
		}
		if got := ops.Count(harness.Subject(subj)); got != 1 {
			t.Fatalf("%s stored %d times:\n%s", subj, got, ops.Describe())
		}
		if got := pubCount(subj); got != 1 {
			t.Fatalf("%s published %d times, want 1", subj, got)
		}
		if got := ops.Count(harness.Subject("ops.e2e.cordon.intent." + node)); got != 1 {
			t.Fatalf("%s: %d intents, want 1", node, got)
		}
	}
	if v := next.Metric("opswire_audit_dropped_total"); v != 0 {
		t.Fatalf("new leader dropped %v audit messages", v)
	}
}

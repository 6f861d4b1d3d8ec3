package e2e

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/test/harness"
)

// acceptedPodDeletes returns, by pod (namespace/name), the times of the pod
// DELETEs the API server accepted, as the proxy saw them: deletions counted
// at the source, where neither the stream's deduplication nor a lost audit
// can hide one.
func acceptedPodDeletes(px *harness.APIProxy) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, r := range px.Requests(acceptedPodDelete) {
		parts := strings.Split(strings.Trim(r.Path, "/"), "/")
		out[parts[3]+"/"+parts[5]] = append(out[parts[3]+"/"+parts[5]], r.Sent)
	}
	return out
}

// deletedOnceEach fails unless each of total pods had exactly one accepted
// DELETE at the proxy, and returns those DELETEs' times, earliest first.
func deletedOnceEach(t *testing.T, px *harness.APIProxy, total int) []time.Time {
	t.Helper()
	var times []time.Time
	for pod, ts := range acceptedPodDeletes(px) {
		if len(ts) != 1 {
			t.Fatalf("%s: %d successful DELETEs, want 1", pod, len(ts))
		}
		times = append(times, ts[0])
	}
	if len(times) != total {
		t.Fatalf("%d pods deleted through the API, want %d", len(times), total)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	return times
}

// acceptedPodDelete: DELETE /api/v1/namespaces/<ns>/pods/<name>, answered 2xx.
func acceptedPodDelete(r harness.APIRequest) bool {
	parts := strings.Split(strings.Trim(r.Path, "/"), "/")
	return r.Method == http.MethodDelete && len(parts) == 6 && parts[4] == "pods" && r.Status >= 200 && r.Status < 300
}

// TestCleanupFailover: 100 evicted pods, at most 20 deletions per 10 s
// window, two replicas. The leader is SIGKILLed in the middle of its first
// burst, by the proxy, while it holds the API's answer to the 5th DELETE:
// that deletion happened but its leader never learns it, so its audit can
// only come from the intent (and others may be in flight or queued). The standby takes
// over inside that window: it completes the audits of the dead leader's
// journaled deletions (intents without their outcome in OPS, pod gone) and
// counts them in its window. No 10 s window sees more than 20 DELETEs
// (counted at the API, through a proxy); every pod is deleted once and
// audited exactly once, counted on a plain subscription that sees every
// publish (the stream would drop a repeat as a duplicate), and in OPS.
func TestCleanupFailover(t *testing.T) {
	const total, perWindow, window = 100, 20, 10 * time.Second
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "bulk")
	cfg := harness.WriteConfig(t, cleanupConfig(fmt.Sprintf("maxDeletionsPerMinute: %d", perWindow), "rateWindow: 10s"))
	startWatcher(t, cp, n, cfg, "w1")
	for i := range total {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("bulk", fmt.Sprintf("ev-%03d", i), worker.Name)))
	}
	harness.Eventually(t, 30*time.Second, "all evictions in KUBE", func() bool {
		for i := range total {
			if s := lastPod(t, n.JS, fmt.Sprintf("kube.e2e.pod.bulk.ev-%03d", i)); s == nil || s.Phase != "Failed" {
				return false
			}
		}
		return true
	})
	ops := harness.CollectOps(t, n, "ops.e2e.cleanup.>")
	// Every publish on the outcome subjects, including any the stream would
	// drop as a duplicate.
	var pubMu sync.Mutex
	published := map[string]int{}
	sub, err := n.Conn.Subscribe("ops.e2e.cleanup.deleted.>", func(m *nats.Msg) {
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
	proxy := harness.StartAPIProxy(t, cp)
	kc := proxy.Kubeconfig(t, cleanupKubeconfig(t, cp))
	procs := map[string]*harness.Process{"a": startCleanup(t, n, cfg, kc, "a"), "b": startCleanup(t, n, cfg, kc, "b")}
	deleted := func(m harness.Msg) bool { return strings.HasPrefix(m.Subject, "ops.e2e.cleanup.deleted.bulk.") }

	// Mid-burst: the leader dies while the proxy holds the answer to the
	// 5th accepted DELETE.
	const killAfter = 5
	var (
		killOnce          sync.Once
		leaderID          string
		killed            time.Time
		deletedBeforeKill int
		auditedBeforeKill int
		killedCh          = make(chan struct{})
	)
	proxy.OnAnswer(func(r harness.APIRequest) {
		if !acceptedPodDelete(r) {
			return
		}
		accepted := proxy.Count(acceptedPodDelete)
		if accepted < killAfter {
			return
		}
		killOnce.Do(func() {
			leaderID = harness.LeaseHolder(cp.Client, "default", "opswire-cleanup")
			if p := procs[leaderID]; p != nil {
				p.Kill()
			}
			killed, deletedBeforeKill, auditedBeforeKill = time.Now(), accepted, ops.Count(deleted)
			close(killedCh)
		})
	})
	select {
	case <-killedCh:
	case <-time.After(60 * time.Second):
		t.Fatal("no 5th DELETE within 60s")
	}
	if procs[leaderID] == nil {
		t.Fatalf("Lease held by %q, not a cleanup replica", leaderID)
	}
	t.Logf("leader %s killed at its DELETE #%d (answer held), %d deletions audited in OPS by then", leaderID, deletedBeforeKill, auditedBeforeKill)
	standby := map[string]*harness.Process{}
	for id, p := range procs {
		if id != leaderID {
			standby[id] = p
		}
	}
	_, next := harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", standby)
	t.Logf("leader %s killed; standby leading after %v", leaderID, time.Since(killed).Round(time.Millisecond))

	harness.Eventually(t, 90*time.Second, "every pod deleted", func() bool {
		for i := range total {
			if harness.PodExists(t, cp.Client, "bulk", fmt.Sprintf("ev-%03d", i)) {
				return false
			}
		}
		return true
	})

	// At the source: each pod deleted exactly once, and no window of 10 s holds
	// more than 20 of those DELETEs, timed when each reached the API (the
	// new leader counts a deletion whose outcome the old one did not store
	// from its intent, stored just before its DELETE, so a tolerance covers
	// that DELETE's latency on a loaded machine; a window the new leader did
	// not seed would put 20 DELETEs within seconds of the old leader's).
	times := deletedOnceEach(t, proxy, total)
	const slack = 500 * time.Millisecond
	for i := 0; i+perWindow < len(times); i++ {
		if gap := times[i+perWindow].Sub(times[i]); gap < window-slack {
			// Not fatal: the audit checks below still report.
			t.Errorf("DELETEs %d and %d only %v apart: more than %d in a %v window across the failover", i, i+perWindow, gap, perWindow, window)
			break
		}
	}
	// In OPS: each pod's outcome exactly once, by subject, and published
	// exactly once (the plain subscription sees a repeat the stream drops).
	harness.Eventually(t, 10*time.Second, "every deletion audited", func() bool { return ops.Count(deleted) >= total })
	perPod := map[string]int{}
	intents := 0
	for _, m := range ops.All() {
		if strings.HasPrefix(m.Subject, "ops.e2e.cleanup.intent.") {
			intents++
			continue
		}
		perPod[m.Subject]++
	}
	pubMu.Lock()
	defer pubMu.Unlock()
	for i := range total {
		subj := fmt.Sprintf("ops.e2e.cleanup.deleted.bulk.ev-%03d", i)
		if c := perPod[subj]; c != 1 {
			t.Fatalf("ev-%03d audited %d times in OPS, want 1:\n%s", i, c, ops.Describe())
		}
		if c := published[subj]; c != 1 {
			t.Fatalf("ev-%03d's outcome published %d times, want 1", i, c)
		}
	}
	if len(perPod) != total {
		t.Fatalf("%d OPS outcome subjects, want only the %d deletions:\n%s", len(perPod), total, ops.Describe())
	}
	if intents != total {
		t.Fatalf("%d intents in OPS, want one per deleted pod (%d)", intents, total)
	}
	// The new leader took over inside the dead leader's window and counted
	// its deletions: at least those the API accepted, at most the cap (an
	// intent whose DELETE was still in flight counts too).
	if v := next.Metric("opswire_rate_window_seeded_actions"); v < float64(deletedBeforeKill) || v > perWindow {
		t.Fatalf("new leader's window seeded with %v deletions from OPS, want %d..%d", v, deletedBeforeKill, perWindow)
	}
	// The DELETE whose answer the dead leader never got is audited only
	// through its intent.
	completed := next.Metric(`opswire_intents_total{result="completed"}`)
	if completed < 1 {
		t.Fatalf("new leader completed %v audits from intents, want at least 1 (the deletion answered after the kill)", completed)
	}
	if v := next.Metric("opswire_audit_dropped_total"); v != 0 {
		t.Fatalf("new leader dropped %v audit messages", v)
	}
	t.Logf("new leader: seeded %v, completed %v audits of the dead leader's deletions, journaled %v intents",
		next.Metric("opswire_rate_window_seeded_actions"), completed, next.Metric(`opswire_intents_total{result="journaled"}`))
	t.Logf("100 deletions over %v", times[total-1].Sub(times[0]).Round(time.Millisecond))
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// faultLease is the lease timing of the kill test: a standby must take over
// within leaseDuration + 2 s of its leader's SIGKILL. With client-go's
// jittered polling that needs retryPeriod ≤ 0.45 s (docs/reliability.md): 300 ms.
const faultLease = 4 * time.Second

// TestFaultEveryServiceKilled runs two replicas of each of the five services
// and SIGKILLs the leader (the active notifier) of each in turn, right as
// work is handed to it. For each it measures the takeover (SIGKILL until the
// standby holds the lease) and the time until the work is done, and checks
// that nothing is done twice: DELETEs and node PATCHes counted at a proxy in
// front of the API, Feishu cards counted at the test server.
func TestFaultEveryServiceKilled(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	bots := feishutest.NewServer()
	t.Cleanup(bots.Close)
	cleanupBot := bots.AddBot("cleanup-bot-token-91c", feishutest.Bot{})
	reportBot := bots.AddBot("report-bot-token-0d2", feishutest.Bot{})
	for _, name := range []string{"worker-a", "worker-b", "worker-c", "worker-d"} {
		harness.CreateNode(t, cp.Client, harness.Node(name, nil))
	}
	harness.CreateNamespace(t, cp.Client, "apps")
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: e2e
controller:
  LeaderElect: true
  leaseLockNamespace: default
  leaseDuration: %s
  renewDeadline: 3s
  retryPeriod: 300ms
autoCordon:
  enable: true
  interval: 2s
  maxPods: 5
  minPods: 2
delException:
  interval: 1s
  minAge: 0s
  msgtitle: cleanup
  apiurl: "%s"
sendReport:
  total: 3
  schedule: "0 0 10 * * 1"
  apiurl: "%s"
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
`, faultLease, cleanupBot, reportBot))

	px := harness.StartAPIProxy(t, cp)
	kubeconfigs := map[string]string{
		"watcher": cp.Kubeconfig,
		"cordon":  px.Kubeconfig(t, cordonRBAC(t, cp, "default")),
		"report":  cp.Kubeconfig,
	}
	// One proxy per cleanup replica: the DELETEs of the killed leader and of
	// the standby are told apart.
	cleanupKC := cleanupKubeconfig(t, cp)
	cpx := map[string]*harness.APIProxy{}
	procs := map[string]map[string]*harness.Process{}
	for _, svc := range []string{"watcher", "cleanup", "cordon", "report", "notifier"} {
		procs[svc] = map[string]*harness.Process{}
		for _, id := range []string{svc + "-a", svc + "-b"} {
			kc := kubeconfigs[svc]
			if svc == "cleanup" {
				cpx[id] = harness.StartAPIProxy(t, cp)
				kc = cpx[id].Kubeconfig(t, cleanupKC)
			}
			p := harness.StartService(t, svc, harness.ServiceOptions{Config: cfg, Kubeconfig: kc, NATSURL: n.URL, ID: id})
			procs[svc][id] = p
		}
	}
	cleanupDeletes := func(pod string) (sent, done int) {
		for _, p := range cpx {
			sent += deletesOf(p, "apps", pod)
			done += doneDeletesOf(p, "apps", pod)
		}
		return sent, done
	}
	for _, ps := range procs {
		for _, p := range ps {
			p.WaitReady(t, 90*time.Second)
		}
	}
	holder := func(svc string) string {
		if svc == "notifier" {
			return notifierLeaseHolder(n.JS, "e2e")
		}
		return harness.LeaseHolder(cp.Client, "default", "opswire-"+svc)
	}
	// kill SIGKILLs the service's current leader once it is settled and
	// returns the standby's id and the kill time; took measures the takeover.
	type figure struct {
		svc                string
		takeover, workDone time.Duration
	}
	var figures []figure
	kill := func(svc string) (standby string, at time.Time) {
		t.Helper()
		var leader string
		harness.Eventually(t, 30*time.Second, svc+" leader", func() bool {
			leader = holder(svc)
			return procs[svc][leader] != nil
		})
		for id := range procs[svc] {
			if id != leader {
				standby = id
			}
		}
		procs[svc][leader].Kill()
		return standby, time.Now()
	}
	waitTakeover := func(svc, standby string, at time.Time) time.Duration {
		t.Helper()
		harness.Eventually(t, faultLease+10*time.Second, svc+" standby to take the lease", func() bool { return holder(svc) == standby })
		took := time.Since(at)
		if took > faultLease+2*time.Second {
			t.Errorf("%s: takeover took %v, more than the lease duration + 2 s", svc, took)
		}
		return took
	}

	// cleanup: five pods evicted, the leader killed by its proxy as the
	// API answers its first DELETE, before the answer reaches it. Every answer
	// to it waits for the kill, so it sends at most one DELETE per worker
	// (4) and the standby has work left: at least one of the five pods.
	var (
		killMu         sync.Mutex // held while the kill is carried out
		killedCleanup  string
		cleanupStandby string
		at             time.Time
		inFlightAtKill int
	)
	for id, p := range cpx {
		p.OnAnswer(func(r harness.APIRequest) {
			if !acceptedPodDelete(r) {
				return
			}
			killMu.Lock()
			defer killMu.Unlock()
			if killedCleanup != "" {
				return
			}
			if harness.LeaseHolder(cp.Client, "default", "opswire-cleanup") != id {
				t.Errorf("cleanup replica %s deleted a pod without holding the lease", id)
			}
			procs["cleanup"][id].Kill()
			killedCleanup, at = id, time.Now()
			inFlightAtKill = p.Count(func(r harness.APIRequest) bool { return r.Method == http.MethodDelete })
			for other := range procs["cleanup"] {
				if other != id {
					cleanupStandby = other
				}
			}
		})
	}
	for i := range 5 {
		evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", fmt.Sprintf("ev-%d", i), "worker-b")))
	}
	harness.Eventually(t, 30*time.Second, "cleanup's leader killed at its first DELETE answer", func() bool {
		// Not a sync.Once: a poll before the first DELETE's answer would use
		// it up and the kill would never happen.
		killMu.Lock() // waits for a kill in progress
		defer killMu.Unlock()
		return killedCleanup != ""
	})
	took := waitTakeover("cleanup", cleanupStandby, at)
	harness.Eventually(t, 30*time.Second, "the 5 evicted pods deleted", func() bool {
		for i := range 5 {
			if harness.PodExists(t, cp.Client, "apps", fmt.Sprintf("ev-%d", i)) {
				return false
			}
		}
		return true
	})
	figures = append(figures, figure{"cleanup", took, time.Since(at)})

	// watcher: a pod created right after the kill reaches KUBE through the standby.
	standby, at := kill("watcher")
	harness.CreatePod(t, cp.Client, harness.Pod("apps", "after-watcher-kill", "worker-c"))
	took = waitTakeover("watcher", standby, at)
	harness.Eventually(t, 30*time.Second, "the new pod in KUBE", func() bool {
		return lastPod(t, n.JS, subject.Pod("e2e", "apps", "after-watcher-kill")) != nil
	})
	figures = append(figures, figure{"watcher", took, time.Since(at)})
	waitConverged(t, cp, n.JS, at, 30*time.Second)

	// cordon: worker-a goes over maxPods right after the kill.
	standby, at = kill("cordon")
	cordonFill(t, cp.Client, "worker-a", 0, 6)
	took = waitTakeover("cordon", standby, at)
	harness.Eventually(t, 30*time.Second, "worker-a cordoned", func() bool { return harness.GetNode(t, cp.Client, "worker-a").Spec.Unschedulable })
	figures = append(figures, figure{"cordon", took, time.Since(at)})

	// report: the standby answers an on-demand report request.
	standby, at = kill("report")
	took = waitTakeover("report", standby, at)
	requestReport(t, n, "e2e")
	figures = append(figures, figure{"report", took, time.Since(at)})

	// notifier: a pod evicted right after the kill; its cleanup card arrives once.
	standby, at = kill("notifier")
	evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", "after-notifier-kill", "worker-b")))
	took = waitTakeover("notifier", standby, at)
	harness.Eventually(t, 30*time.Second, "the card of the pod deleted after the notifier kill", func() bool {
		return cardMentions(bots, "cleanup-bot-token-91c", "apps/after-notifier-kill") >= 1
	})
	figures = append(figures, figure{"notifier", took, time.Since(at)})

	for _, f := range figures {
		t.Logf("%-8s SIGKILL → standby holds the lease %v (bound %v); work done %v after the kill",
			f.svc, f.takeover.Round(time.Millisecond), faultLease+2*time.Second, f.workDone.Round(time.Millisecond))
	}
	// Nothing done twice: one DELETE per pod, one cordon PATCH, one card per pod.
	// A DELETE cut off by its sender's death (answered 502 by the proxy) may
	// or may not have been carried out by the API server; the next leader
	// completes it if not. Every pod is gone (above); none was deleted twice.
	cut := 0
	for _, pod := range []string{"ev-0", "ev-1", "ev-2", "ev-3", "ev-4", "after-notifier-kill"} {
		sent, done := cleanupDeletes(pod)
		if done > 1 {
			t.Errorf("%s: %d successful DELETE requests, want at most 1", pod, done)
		}
		cut += sent - done
	}
	t.Logf("DELETEs cut off by the cleanup leader's SIGKILL: %d", cut)
	// The standby did the cleanup the killed leader could not: at least the
	// pods it had not sent a DELETE for.
	evDelete := func(r harness.APIRequest) bool {
		return r.Method == http.MethodDelete && strings.HasPrefix(r.Path, "/api/v1/namespaces/apps/pods/ev-")
	}
	killedSent, standbySent := cpx[killedCleanup].Count(evDelete), cpx[cleanupStandby].Count(evDelete)
	t.Logf("cleanup DELETEs of the 5 evicted pods: killed leader %s %d (%d in flight at the kill), standby %s %d", killedCleanup, killedSent, inFlightAtKill, cleanupStandby, standbySent)
	if standbySent < 5-killedSent || standbySent < 1 {
		t.Errorf("the standby sent %d DELETEs, want at least the %d of the 5 evicted pods the killed leader did not", standbySent, 5-killedSent)
	}
	patches := px.Count(func(r harness.APIRequest) bool {
		return r.Method == http.MethodPatch && r.Path == "/api/v1/nodes/worker-a"
	})
	if patches != 1 {
		t.Errorf("worker-a: %d PATCH requests, want 1 (the cordon)", patches)
	}
	// Let the notifier's held messages come back (ackWait) before counting cards.
	waitSettled(t, n.JS, 30*time.Second)
	audited := opsSubjects(t, n.JS, "ops.e2e.cleanup.deleted.apps.>")
	unaudited := 0
	for _, pod := range []string{"ev-0", "ev-1", "ev-2", "ev-3", "ev-4", "after-notifier-kill"} {
		stored := audited["ops.e2e.cleanup.deleted.apps."+pod]
		cards := cardMentions(bots, "cleanup-bot-token-91c", "apps/"+pod)
		switch {
		case stored > 1:
			t.Errorf("apps/%s: %d deletions in OPS, want 1", pod, stored)
		case stored == 0:
			// A deletion the killed leader had in flight whose intent was not
			// journaled in time (its write went ahead without one): the next
			// leader finds the pod gone and nothing to complete. Journaled
			// ones are completed by the standby at its takeover.
			unaudited++
			t.Logf("apps/%s: deleted by the killed leader, its OPS record lost with it", pod)
		}
		if cards != stored {
			t.Errorf("apps/%s in %d Feishu cards, want %d (one per OPS record)", pod, cards, stored)
		}
	}
	t.Logf("deletions without an OPS record (the killed leader's last writes): %d of 6", unaudited)
	// At most the deletions in flight at the kill can lack a record, and of
	// those at most one (the rest are journaled and completed): a build that
	// lost the records of a takeover would show several here.
	if unaudited > min(1, inFlightAtKill) {
		t.Errorf("%d deletions without an OPS record, want at most 1 (of %d in flight at the kill)", unaudited, inFlightAtKill)
	}
}

// cardMentions counts the accepted cards of a bot that mention text.
func cardMentions(bots *feishutest.Server, token, text string) int {
	n := 0
	for _, c := range bots.Cards(token) {
		if strings.Contains(c.Text(), text) {
			n++
		}
	}
	return n
}

// notifierLeaseHolder is the --id holding the notifier's KV lease ("" when none).
func notifierLeaseHolder(js jetstream.JetStream, cluster string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, "opswire-notifier-lease")
	if err != nil {
		return ""
	}
	e, err := kv.Get(ctx, cluster)
	if err != nil {
		return ""
	}
	return string(e.Value())
}

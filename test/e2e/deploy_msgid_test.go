package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployMsgIDSquatting: OPS deduplicates by Nats-Msg-Id across all its
// subjects, and the actors' ids are predictable from KUBE. With deploy/'s
// users on a real server, the report user publishes, on its own subject
// ops.e2e.report.restarts, a forged cleanup decision holding the id cleanup
// will give its record of deleting a pod (cleanup/<podUID>/deleted). Cleanup
// must still store its record (counted at the source: its
// opswire_publish_suppressed_total{result="foreign"}), under its own subject
// with its own ce-id, and the notifier must deliver the real decision once and
// terminate the forgery (docs/security.md).
func TestDeployMsgIDSquatting(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n, pw := harness.StartDeployedNATS(t)
	hook := newWebhookRecorder(t)
	urlFile := filepath.Join(t.TempDir(), "hook-url")
	if err := os.WriteFile(urlFile, []byte(hook.URL+"/hooks/msgid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := harness.WriteConfig(t, cleanupConfig()+fmt.Sprintf(`notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  receivers:
  - name: audit
    type: webhook
    urlFile: %s
  routes:
  - subjects: ['ops.*.cleanup.>', 'ops.*.report.>']
    receivers: [audit]
`, urlFile))
	env := func(user string) []string {
		e := []string{"OPSWIRE_NATS_USER=" + user, "OPSWIRE_NATS_PASSWORD=" + pw[user]}
		if user != "watcher" {
			e = append(e, "OPSWIRE_MANAGE_STREAMS=false")
		}
		return e
	}
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	for _, name := range []string{"worker-2", "worker-3"} {
		harness.CreateNode(t, cp.Client, harness.Node(name, nil))
	}
	harness.CreateNamespace(t, cp.Client, "apps")
	w := harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "w1", Env: env("watcher")})
	w.WaitReady(t, 60*time.Second)
	cl := harness.StartService(t, "cleanup", harness.ServiceOptions{Config: cfg, Kubeconfig: cleanupKubeconfig(t, cp), NATSURL: n.URL, ID: "a", Env: env("cleanup")})
	harness.WaitLeader(t, cp.Client, "default", "opswire-cleanup", map[string]*harness.Process{"a": cl})
	nt := harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "notifier-a", Env: env("notifier")})
	nt.WaitReady(t, 60*time.Second)

	// The victim, running; its UID is in KUBE for every actor to read.
	p := harness.CreatePod(t, cp.Client, harness.Pod("apps", "victim", worker.Name))
	id := "cleanup/" + string(p.UID) + "/deleted"

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := connectAs(t, n, "report", pw["report"])
	rjs, err := jetstream.New(rep.nc)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := envelope.New(id, envelope.Source("e2e", "cleanup"), events.TypeCleanup, "apps/victim",
		events.CleanupDecision{Verb: "deleted", Namespace: "apps", Pod: "victim", PodUID: string(p.UID), Reason: "Forged", Severity: events.SeverityWarning}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rjs.PublishMsg(ctx, forged.Msg(subject.Ops("e2e", "report", "restarts"))); err != nil {
		t.Fatalf("report publishes its own subject: %v", err)
	}

	evict(t, cp, p)
	harness.Eventually(t, 10*time.Second, "evicted pod deleted", func() bool { return !harness.PodExists(t, cp.Client, "apps", "victim") })

	// Cleanup's record is in OPS, on its subject, with its id (read as audit).
	a := connectAs(t, n, "audit", pw["audit"])
	ajs, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := ajs.Stream(ctx, "OPS")
	if err != nil {
		t.Fatal(err)
	}
	subj := subject.Ops("e2e", "cleanup", "deleted", "apps", "victim")
	var stored *jetstream.RawStreamMsg
	harness.Eventually(t, 15*time.Second, "cleanup's record stored in OPS", func() bool {
		stored, err = ops.GetLastMsgForSubject(ctx, subj)
		return err == nil
	})
	if got := stored.Header.Get(envelope.HeaderID); got != id {
		t.Errorf("stored ce-id %q, want %q", got, id)
	}
	t.Logf("cleanup's record: seq %d, Nats-Msg-Id %q", stored.Sequence, stored.Header.Get(envelope.HeaderMsgID))
	if v := cl.Metric(`opswire_publish_suppressed_total{result="foreign"}`); v != 1 {
		t.Errorf("cleanup's opswire_publish_suppressed_total{result=\"foreign\"} = %v, want 1", v)
	}

	// The notifier: the real decision delivered once, the forgery terminated.
	harness.Eventually(t, 20*time.Second, "the decision delivered and the forgery terminated", func() bool {
		distinct, _ := hook.counts()
		return distinct >= 1 && nt.Metric(`opswire_notifier_messages_total{consumer="audit",result="malformed"}`) == 1
	})
	harness.Never(t, 3*time.Second, "the decision delivered twice", func() bool {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return hook.ids[id] != 1 || len(hook.ids) != 1
	})
}

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// fleetIDTheft: cluster a publishes, first, a decision under its own
// subject carrying the Nats-Msg-Id of b's next decision (ids are
// predictable: cleanup/<pod uid>/deleted). The fleet OPS has no id
// deduplication (docs/fleet.md#trust), so b's decision is stored and b's
// card arrives, counted at the Feishu test server.
func fleetIDTheft(t *testing.T, f *fleet) {
	t.Helper()
	a := f.edges["a"]
	b := f.edges["b"]
	pod := harness.CreatePod(t, b.cp.Client, harness.Pod("shop", "id-target-b", "node-b"))
	id := "cleanup/" + string(pod.UID) + "/deleted"
	cleanupA := connectUser(t, a.url, f.caFile, "cleanup", f.pw["cleanup"])
	thief, err := envelope.New(id, envelope.Source("a", "cleanup"), events.TypeCleanup, "shop/id-thief-a",
		events.CleanupDecision{Verb: "deleted", Namespace: "shop", Pod: "id-thief-a", PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := natsx.PublishEvent(ctx, jetStream(t, cleanupA), subject.Ops("a", "cleanup", "deleted", "shop", "id-thief-a"), thief, 5*time.Second); err != nil {
		t.Fatalf("cleanup on a's edge: %v", err)
	}
	harness.Eventually(t, 60*time.Second, "a's message with b's id in the fleet OPS", func() bool {
		return streamSubjects(t, f.auditJS, "OPS", "ops.a.>")["ops.a.cleanup.deleted.shop.id-thief-a"] == 1
	})
	evict(t, b.cp, pod)
	harness.Eventually(t, 60*time.Second, "b's decision in the fleet OPS", func() bool {
		return streamSubjects(t, f.auditJS, "OPS", "ops.b.>")["ops.b.cleanup.deleted.shop.id-target-b"] == 1
	})
	harness.Eventually(t, 60*time.Second, "b's card at the Feishu server", func() bool {
		return cardsNaming(f.cardTexts(), []string{"id-target-b"})["id-target-b"] == 1
	})

	t.Logf("a's decision carrying the id of b's next one did not suppress b's decision in the fleet OPS or b's card")
}

package cordon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// TestASettledDoubtStoresItsAnswerSoTheNextLeaderDecidesAtOnce: attempt 1's
// patch loses its answer (503); leader 1 settles it "not applied" at its
// horizon (the node unchanged: it can no longer commit). Attempt 2, on the
// same node version (same outcome id), is refused (403) and stores its
// answer record. actuate.LatestAttempts trusts attempt 2's answer only when
// every attempt of the id has one, so settling "not applied" stores attempt
// 1's record too, and a new leader decides at once instead of waiting out a
// whole horizon (85 s by default).
func TestASettledDoubtStoresItsAnswerSoTheNextLeaderDecidesAtOnce(t *testing.T) {
	n := apiNode("a")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.act.cfg.Now = func() time.Time { return clock }
	in := actuatetest.NewJournal(true)
	h.act.cfg.Intents = in
	patches := 0
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if patches++; patches == 1 {
			return true, nil, apierrors.NewServiceUnavailable("etcd leader change")
		}
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "a", errors.New("admission webhook denied the request"))
	})
	state := mirrorOf(n, 100)
	if out, err := h.act.Apply(context.Background(), state, false, Evaluate(p, state, false)); err != nil || out.RequeueAfter <= 0 {
		t.Fatalf("first attempt: %+v, %v; want the 503 in doubt", out, err)
	}
	clock = clock.Add(h.act.horizon()) // unchanged: attempt 1 settled not applied, attempt 2 sent (403)
	_, _ = h.act.Apply(context.Background(), state, false, Evaluate(p, state, false))
	if patches != 2 || in.Count() != 2 || len(in.Answers) != 2 {
		t.Fatalf("setup: %d patches, %d intents, %d answer records; want 2, 2, 2 (attempt 1's when settled past its horizon, attempt 2's 403)",
			patches, in.Count(), len(in.Answers))
	}
	var stored []actuate.StoredIntent
	for _, m := range append(append(in.Msgs[:0:0], in.Msgs...), in.Answers...) {
		var it events.Intent
		if _, err := envelope.Decode(m.Header, m.Data, events.TypeIntent, &it); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, actuate.StoredIntent{Intent: it})
	}
	latest := actuate.LatestAttempts(stored)
	if len(latest) != 1 {
		t.Fatalf("setup: %d outcome ids, want 1 (same node version)", len(latest))
	}
	clock = clock.Add(5 * time.Second) // a new leader
	pub2, ledger2 := &actuatetest.Publisher{}, NewLedger(false)
	act2 := NewActuator(h.client, pub2, record.NewFakeRecorder(10), ledger2, NewFleets(staticNodes{state}, ledger2, p, h.client, 0),
		ActuatorConfig{Cluster: "prod", Policy: p, Identity: "replica-b", Now: h.act.cfg.Now}, NewMetrics(nil), zerolog.Nop())
	if ok, err := act2.Happened(context.Background(), latest[0].Intent); ok || err != nil {
		t.Fatalf("new leader's Happened(latest attempt, answered %q) = %v, %v; want false at once: attempt 1 was settled past its horizon, attempt 2 answered 403",
			latest[0].Intent.Answered, ok, err)
	}
}

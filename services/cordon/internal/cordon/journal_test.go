package cordon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// TestActuatorJournalsBeforeThePatch: for a cordon, an uncordon and a
// handover, the intent is stored before the node patch, names the node, its
// UID and the verb, and carries the outcome message that is then published
// byte for byte; an intent the journal could not store does not hold the
// patch back. After the patch the new leader's check finds it happened;
// before it (same resourceVersion) it does not. A refusal and a dry run
// write no intent.
func TestActuatorJournalsBeforeThePatch(t *testing.T) {
	tests := []struct {
		verb     string
		node     *corev1.Node
		livePods int
		evicting int
	}{
		{VerbCordoned, apiNode("a"), 100, 0},
		{VerbUncordoned, apiNode("a", ours(EffectCordon)), 10, 0},
		{VerbHandedOver, apiNode("a", ours(EffectCordon)), 40, 60}, // a person drains it
	}
	for _, tc := range tests {
		for _, stored := range []bool{true, false} {
			t.Run(tc.verb+"/stored="+strconv.FormatBool(stored), func(t *testing.T) {
				objs := append([]runtime.Object{tc.node}, pods(tc.node.Name, tc.livePods)...)
				objs = append(objs, evictingPods(tc.node.Name, tc.evicting)...)
				h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, objs...)
				in := &actuatetest.Intents{Stored: stored}
				h.act.cfg.Intents = in
				var atPatch []int
				h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					atPatch = append(atPatch, in.Count())
					return false, nil, nil
				})
				state := mirrorOf(tc.node, tc.livePods+tc.evicting)
				state.Evicting = tc.evicting
				marked := h.ledger.Marked(state)
				d := Evaluate(seedPolicy("cordon"), state, marked)
				if _, err := h.act.Apply(context.Background(), state, marked, d); err != nil {
					t.Fatal(err)
				}
				if len(atPatch) != 1 || atPatch[0] != 1 {
					t.Fatalf("intents stored when the patch ran: %v, want [1]", atPatch)
				}
				msg, ev, intent := in.Intent(t, 0)
				if msg.Subject != "ops.prod.cordon.intent.a" || ev.ID != actuate.IntentID("cordon/uid-a/"+tc.verb+"/41", intent.Time) ||
					msg.Header.Get(envelope.HeaderMsgID) != ev.ID || intent.UID != "uid-a" || intent.Action != tc.verb ||
					intent.Name != "a" || intent.Namespace != "" || intent.Kind != "Node" || intent.Actor != Service {
					t.Fatalf("intent %s %s %+v", msg.Subject, ev.ID, intent)
				}
				outs := h.pub.All()
				if len(outs) != 1 {
					t.Fatalf("%d outcomes published, want 1", len(outs))
				}
				out := outs[0]
				if intent.Outcome.Subject != out.Subject || intent.Outcome.ID != out.Header.Get(envelope.HeaderMsgID) ||
					string(intent.Outcome.Data) != string(out.Data) || intent.Outcome.Type != events.TypeCordon ||
					out.Subject != "ops.prod.cordon."+tc.verb+".a" {
					t.Fatalf("intent carries %s %s %s; published %s %s %s", intent.Outcome.Subject, intent.Outcome.ID,
						intent.Outcome.Data, out.Subject, out.Header.Get(envelope.HeaderMsgID), out.Data)
				}
				// The fake API keeps the resourceVersion the patch carried;
				// a real one moves it on.
				n := h.node(t, "a")
				n.ResourceVersion = "42"
				if _, err := h.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				if ok, err := h.act.Happened(context.Background(), intent); err != nil || !ok {
					t.Fatalf("after the patch: Happened = %v, %v; want true", ok, err)
				}
			})
		}
	}
	t.Run("not patched yet", func(t *testing.T) {
		h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{apiNode("a")}, pods("a", 100)...)...)
		in := &actuatetest.Intents{Stored: true}
		h.act.cfg.Intents = in
		h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("API down")
		})
		state := mirrorOf(apiNode("a"), 100)
		// The answer is lost and the node unchanged: in doubt, read again later.
		if out, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil || out.RequeueAfter <= 0 {
			t.Fatalf("%+v, %v; want the write in doubt", out, err)
		}
		_, _, intent := in.Intent(t, 0)
		// Within the late-commit horizon an unchanged node is no proof:
		// the recovery retries (an error, not ErrUnverifiable).
		advance := clock(h)
		if ok, err := h.act.Happened(context.Background(), intent); err == nil || ok || errors.Is(err, actuate.ErrUnverifiable) {
			t.Fatalf("patch failed, within the horizon: Happened = %v, %v; want a retryable error", ok, err)
		}
		advance(h.act.horizon())
		if ok, err := h.act.Happened(context.Background(), intent); err != nil || ok {
			t.Fatalf("patch failed, past the horizon: Happened = %v, %v; want false", ok, err)
		}
	})
	t.Run("refusal and dry run", func(t *testing.T) {
		objs := append([]runtime.Object{apiNode("a")}, pods("a", 100)...)
		for _, dry := range []bool{false, true} {
			fleet := Fleet{Held: 5, Managed: 10} // over the 20 % cap: refused
			if dry {
				fleet = Fleet{Managed: 10}
			}
			h := newHarness(t, seedPolicy("cordon"), dry, fleet, objs...)
			in := &actuatetest.Intents{Stored: true}
			h.act.cfg.Intents = in
			state := mirrorOf(apiNode("a"), 100)
			if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
				t.Fatal(err)
			}
			if in.Count() != 0 || len(decisions(t, h.pub)) != 1 {
				t.Fatalf("dryRun=%v: %d intents, %d messages; want 0 intents, 1 message", dry, in.Count(), len(decisions(t, h.pub)))
			}
		}
	})
}

// TestActuatorRetriedCordonIntentIsRecoverable: a cordon's patch fails (a
// 503 that wrote nothing: in doubt until it can no longer commit, then
// failed) and the retry, on the same node version, succeeds; the leader is
// SIGKILLed before the outcome is stored. OPS
// holds the first attempt's intent only (the retry's has its own id, but was
// not stored: NATS slow for it; before each attempt had its own id, the
// stream dropped it as a duplicate), with the first attempt's outcome and
// time, while the mark carries the retry's time. The new leader's Happened
// still finds the cordon: the mark's rv is the version the intent was
// decided on, which only one patch can have been applied to.
func TestActuatorRetriedCordonIntentIsRecoverable(t *testing.T) {
	n := apiNode("a")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h.act.cfg.Now = func() time.Time { return clock }
	in := &actuatetest.Intents{Stored: true}
	h.act.cfg.Intents = in
	fail := true
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail {
			fail = false
			return true, nil, apierrors.NewServiceUnavailable("etcd leader change")
		}
		return false, nil, nil
	})
	state := mirrorOf(n, 100)
	if out, err := h.act.Apply(context.Background(), state, false, Evaluate(p, state, false)); err != nil || out.RequeueAfter <= 0 {
		t.Fatalf("first attempt: %+v, %v; want the 503 in doubt", out, err)
	}
	clock = clock.Add(h.act.horizon()) // the node unchanged since: the 503 wrote nothing
	if _, err := h.act.Apply(context.Background(), state, false, Evaluate(p, state, false)); err != nil {
		t.Fatal(err)
	}
	if in.Count() != 2 {
		t.Fatalf("%d intents, want 2", in.Count())
	}
	_, _, first := in.Intent(t, 0)
	_, _, retry := in.Intent(t, 1)
	if !retry.Time.After(first.Time) || retry.Outcome.ID != first.Outcome.ID {
		t.Fatalf("the retry's intent (%v, %s) is not a later attempt at the first's (%v, %s): not the case under test",
			retry.Time, retry.Outcome.ID, first.Time, first.Outcome.ID)
	}
	// The fake API keeps the resourceVersion the patch carried; a real one moves it on.
	live := h.node(t, "a")
	live.ResourceVersion = "42"
	if _, err := h.client.CoreV1().Nodes().Update(context.Background(), live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// OPS stored the first intent only.
	if ok, err := h.act.Happened(context.Background(), first); err != nil || !ok {
		t.Fatalf("the cordon happened (node %s, mark %s), but the stored intent's Happened = %v, %v",
			live.ResourceVersion, live.Annotations[events.AnnotationAutoCordon], ok, err)
	}
}

// TestActuatorHappened: the new leader's live check of a cordon intent
// without its outcome, on the node read by name.
func TestActuatorHappened(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mark := func(effects []string, when time.Time) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Labels[events.LabelAutoCordon] = MarkLabelValue
			b, _ := json.Marshal(Mark{Effects: effects, TaintKeys: []string{events.LabelAutoCordon}, Time: when})
			n.Annotations = map[string]string{events.AnnotationAutoCordon: string(b)}
		}
	}
	markRV := func(rv string, when time.Time) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Labels[events.LabelAutoCordon] = MarkLabelValue
			b, _ := json.Marshal(Mark{Effects: []string{EffectCordon}, Time: when, RV: rv})
			n.Annotations = map[string]string{events.AnnotationAutoCordon: string(b)}
		}
	}
	unschedulable := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	taint := withTaint(events.LabelAutoCordon)
	other := withTaint("dedicated")
	tests := []struct {
		name string
		verb string
		mode string
		node *corev1.Node // nil: gone
		want bool
	}{
		{"cordoned: marked by this write, unschedulable", VerbCordoned, EffectCordon, apiNode("a", mark([]string{EffectCordon}, at), unschedulable), true},
		{"cordoned: tainted by this write", VerbCordoned, EffectTaint, apiNode("a", mark([]string{EffectTaint}, at), taint), true},
		{"cordoned: unchanged since the decision", VerbCordoned, EffectCordon, apiNode("a", func(n *corev1.Node) { n.ResourceVersion = "40" }), false},
		{"cordoned: no mark (a person undid it, or not written)", VerbCordoned, EffectCordon, apiNode("a"), false},
		{"cordoned: mark left, cordon lifted by a person", VerbCordoned, EffectCordon, apiNode("a", mark([]string{EffectCordon}, at)), false},
		{"cordoned: mark left, taint removed by a person", VerbCordoned, EffectTaint, apiNode("a", mark([]string{EffectTaint}, at), other), false},
		{"cordoned: the mark of another write", VerbCordoned, EffectCordon, apiNode("a", mark([]string{EffectCordon}, at.Add(time.Minute)), unschedulable), false},
		{"cordoned: a retry's mark on the same version (a later time)", VerbCordoned, EffectCordon, apiNode("a", markRV("40", at.Add(2*time.Second)), unschedulable), true},
		// A re-apply whose answer was lost, then a person lifted the cordon
		// again: the mark names the write.
		{"cordoned: this write's mark (its rv), cordon lifted by a person since", VerbCordoned, EffectCordon, apiNode("a", markRV("40", at)), true},
		{"cordoned: the mark of a write on another version (same time)", VerbCordoned, EffectCordon, apiNode("a", markRV("39", at), unschedulable), false},
		{"cordoned: the mark lists another mode", VerbCordoned, EffectTaint, apiNode("a", mark([]string{EffectCordon}, at), unschedulable), false},
		{"uncordoned: unmarked and schedulable", VerbUncordoned, EffectCordon, apiNode("a"), true},
		{"uncordoned: untainted, other taints stay", VerbUncordoned, EffectTaint, apiNode("a", other), true},
		{"uncordoned: taint mode, a person's cordon stays", VerbUncordoned, EffectTaint, apiNode("a", unschedulable), true},
		{"uncordoned: still marked", VerbUncordoned, EffectCordon, apiNode("a", mark([]string{EffectCordon}, at), unschedulable), false},
		{"uncordoned: still tainted", VerbUncordoned, EffectTaint, apiNode("a", taint), false},
		{"uncordoned: unmarked but cordoned since", VerbUncordoned, EffectCordon, apiNode("a", unschedulable), false},
		{"handedover: unmarked, still unschedulable", VerbHandedOver, EffectCordon, apiNode("a", unschedulable), true},
		{"handedover: still marked", VerbHandedOver, EffectCordon, apiNode("a", mark([]string{EffectCordon}, at), unschedulable), false},
		{"handedover: the person's cordon lifted since", VerbHandedOver, EffectCordon, apiNode("a"), false},
		{"handedover: opswire's taint still there", VerbHandedOver, EffectTaint, apiNode("a", unschedulable, taint), false},
		{"node gone", VerbCordoned, EffectCordon, nil, false},
		{"node replaced", VerbUncordoned, EffectCordon, apiNode("a", func(n *corev1.Node) { n.UID = "uid-new" }), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.node != nil {
				objs = append(objs, tc.node)
			}
			h := newHarness(t, seedPolicy(EffectCordon), false, Fleet{Managed: 10}, objs...)
			got, err := h.act.Happened(context.Background(), intentFor(t, tc.verb, tc.mode, at))
			if err != nil || got != tc.want {
				t.Fatalf("Happened = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	// The intents above are older than the late-commit horizon (an
	// unchanged node within it: TestActuatorJournalsBeforeThePatch).
	h := newHarness(t, seedPolicy(EffectCordon), false, Fleet{Managed: 10})
	h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("API down")
	})
	if _, err := h.act.Happened(context.Background(), intentFor(t, VerbCordoned, EffectCordon, at)); err == nil {
		t.Fatal("an API error must fail the check (the recovery retries)")
	}
}

// intentFor is the intent of a write of verb in mode on node a, decided on
// resourceVersion 40 at the time at.
func intentFor(t *testing.T, verb, mode string, at time.Time) events.Intent {
	t.Helper()
	data, err := json.Marshal(events.CordonDecision{Verb: verb, Mode: mode, Node: "a", NodeUID: "uid-a", Time: at, ResourceVersion: "40"})
	if err != nil {
		t.Fatal(err)
	}
	return events.Intent{Actor: Service, Action: verb, Kind: "Node", Name: "a", UID: "uid-a",
		Outcome: events.IntentOutcome{ID: "cordon/uid-a/" + verb + "/40", Data: data}}
}

// TestActuatorLiveActions: after a cordon, the API's record (the node's
// mark) yields the cordon's outcome audit with the id and subject of the one
// published, and the decision's node, uid, rv and time; a mark older than
// since, or without the rv (an older version's), yields nothing.
func TestActuatorLiveActions(t *testing.T) {
	old := apiNode("b", ours(EffectCordon)) // a mark without rv
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10}, append([]runtime.Object{apiNode("a"), old}, pods("a", 100)...)...)
	state := mirrorOf(apiNode("a"), 100)
	if _, err := h.act.Apply(context.Background(), state, false, Evaluate(seedPolicy("cordon"), state, false)); err != nil {
		t.Fatal(err)
	}
	outs := decisions(t, h.pub)
	if len(outs) != 1 {
		t.Fatalf("%d outcomes published, want 1", len(outs))
	}
	orig := h.pub.All()[0]
	now := h.act.cfg.Now()
	live, err := h.act.LiveActions(context.Background(), now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(live) != 1 {
		t.Fatalf("%d live actions, want a's cordon only", len(live))
	}
	la := live[0]
	var d events.CordonDecision
	if err := json.Unmarshal(la.Outcome.Data, &d); err != nil {
		t.Fatal(err)
	}
	if la.Subject != orig.Subject || la.Outcome.ID != orig.Header.Get(envelope.HeaderMsgID) || la.Outcome.ID != "cordon/uid-a/cordoned/41" ||
		!la.Time.Equal(now) || d.Node != "a" || d.NodeUID != "uid-a" || d.ResourceVersion != "41" || d.Verb != VerbCordoned ||
		d.Code != outs[0].D.Code || d.Replica != "replica-a" || d.Pods != outs[0].D.Pods {
		t.Fatalf("live action %s %s at %v %+v; published %s %s %+v", la.Subject, la.Outcome.ID, la.Time, d,
			orig.Subject, orig.Header.Get(envelope.HeaderMsgID), outs[0])
	}
	if live, err := h.act.LiveActions(context.Background(), now.Add(time.Second)); err != nil || len(live) != 0 {
		t.Fatalf("since after the mark: %d live actions, %v; want none", len(live), err)
	}
}

// TestActuatorLiveReleases: opswire-cordon's Events of an uncordon and a
// handover yield their outcomes with the ids the lost ones had (the node
// version the Event names); an aggregated Event, another component's, an
// older one and a refusal yield nothing.
func TestActuatorLiveReleases(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	event := func(name, reason, component, msg string, count int32, when time.Time) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n-" + name, UID: types.UID("uid-" + name), ResourceVersion: "7"},
			Reason:         reason, Message: msg, Source: corev1.EventSource{Component: component, Host: "r1"},
			Count: count, LastTimestamp: metav1.NewTime(when)}
	}
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10},
		event("u", EventUncordoned, EventSource, "opswire uncordoned (cordon): 2 pods <= minPods 2", 1, at),
		event("h", EventHandedOver, EventSource, "opswire handedover (taint): drained", 1, at),
		event("agg", EventUncordoned, EventSource, "opswire uncordoned (cordon): x", 2, at),
		event("other", EventUncordoned, "someone-else", "opswire uncordoned (cordon): x", 1, at),
		event("old", EventUncordoned, EventSource, "opswire uncordoned (cordon): x", 1, at.Add(-time.Hour)),
		event("refused", EventRefused, EventSource, "opswire did not cordon: x", 1, at))
	live, err := h.act.LiveActions(context.Background(), at.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]events.CordonDecision{}
	for _, la := range live {
		var d events.CordonDecision
		if err := json.Unmarshal(la.Outcome.Data, &d); err != nil {
			t.Fatal(err)
		}
		if !la.Time.Equal(at) || la.Subject != "ops.prod.cordon."+d.Verb+"."+d.Node {
			t.Fatalf("live action %s at %v", la.Subject, la.Time)
		}
		got[la.Outcome.ID] = d
	}
	u, h2 := got["cordon/uid-u/uncordoned/7"], got["cordon/uid-h/handedover/7"]
	if len(got) != 2 || u.Verb != VerbUncordoned || u.Action != string(ActionUncordon) || u.Mode != EffectCordon ||
		u.Reason != "2 pods <= minPods 2" || u.Replica != "r1" || u.Node != "n-u" ||
		h2.Verb != VerbHandedOver || h2.Mode != EffectTaint || h2.Severity != events.SeverityWarning {
		t.Fatalf("live releases %+v", got)
	}
}

// TestInDoubtAcrossTermEnd: leader 1's cordon of a is
// answered 504 and its commit has not landed (the server's handler runs on
// for up to its 60 s request timeout); leader 1 holds it in doubt, then its
// term ends (the usual cause: the same API/etcd trouble stops its lease
// renewals). Leader 2 starts 20 s after the write, well inside the late-commit
// horizon. Its recovery asks Happened about the open intent: the node is
// unchanged, which within the horizon is no proof, so Happened must not
// answer a final false (the recovery would complete and leader 2 act before
// the late commit lands at 30 s).
//
// Recovery is simulated as SeedAndRecover does it: Happened until it answers
// without an error (an error retries the whole recovery, 5 s later here);
// true publishes the intent's outcome. Then leader 2 decides b (cap 1).
//
// Want: a's cordon, which happened, audited once; never two cordoned nodes
// under a cap of 1.
func TestInDoubtAcrossTermEnd(t *testing.T) {
	p := withPolicy(EffectCordon, func(p *Policy) { p.MaxCordonedNodes = 1 })
	names := []string{"a", "b"}
	for i := range 8 {
		names = append(names, fmt.Sprintf("free-%d", i))
	}
	var objs []runtime.Object
	var mirror staticNodes
	for _, n := range names {
		count := 0
		if n == "a" || n == "b" {
			count = 100
			objs = append(objs, pods(n, 100)...)
		}
		objs = append(objs, apiNode(n))
		mirror = append(mirror, mirrorOf(apiNode(n), count))
	}
	h := newHarness(t, p, false, Fleet{Managed: 10}, objs...)
	in := &actuatetest.Intents{Stored: true}
	h.act.cfg.Intents = in
	advance := clock(h)
	t0 := h.act.cfg.Now()
	var late k8stesting.Action // a's PATCH: answered 504, its commit not landed yet
	h.client.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if late == nil && act.(k8stesting.PatchAction).GetName() == "a" {
			late = act
			return true, nil, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
		}
		return false, nil, nil
	})
	land := func() { // the late commit: the patch applied, the rv moved on
		if late == nil {
			return
		}
		if _, _, err := k8stesting.ObjectReaction(h.client.Tracker())(late); err != nil {
			t.Fatal(err)
		}
		late = nil
		n := h.node(t, "a")
		n.ResourceVersion = "42"
		if err := h.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
			t.Fatal(err)
		}
	}
	landAt := t0.Add(30 * time.Second)

	// Leader 1.
	sa := mirror[0]
	out, err := h.act.Apply(context.Background(), sa, false, Evaluate(p, sa, false))
	if err != nil || out.RequeueAfter <= 0 || len(decisions(t, h.pub)) != 0 || in.Count() != 1 {
		t.Fatalf("leader 1: %+v %v, %d published, %d intents; want a's cordon in doubt", out, err, len(decisions(t, h.pub)), in.Count())
	}
	_, _, intent := in.Intent(t, 0)
	// Leader 1's term ends; its actuator (and its doubt) is dropped.

	// Leader 2, 20 s after the write.
	advance(20 * time.Second)
	pub2, ledger2 := &actuatetest.Publisher{}, NewLedger(false)
	act2 := NewActuator(h.client, pub2, record.NewFakeRecorder(100), ledger2, NewFleets(mirror, ledger2, p, h.client, 0),
		ActuatorConfig{Cluster: "prod", Policy: p, Identity: "replica-b", Now: h.act.cfg.Now}, h.m, zerolog.Nop())
	for attempt := 1; ; attempt++ {
		if !h.act.cfg.Now().Before(landAt) {
			land()
		}
		happened, err := act2.Happened(context.Background(), intent)
		t.Logf("recovery attempt %d at +%s: Happened = %v, %v", attempt, h.act.cfg.Now().Sub(t0), happened, err)
		if err == nil {
			if happened {
				o := intent.Outcome
				pub2.Publish(o.Subject, envelope.Event{ID: o.ID, Source: o.Source, Type: o.Type, Time: o.Time, Subject: o.Object, Data: o.Data})
			}
			break
		}
		if attempt > 40 {
			t.Fatal("recovery never completes")
		}
		advance(5 * time.Second)
	}
	sb := mirror[1]
	out, err = act2.Apply(context.Background(), sb, false, Evaluate(p, sb, false))
	t.Logf("leader 2, b at +%s: %+v %v", h.act.cfg.Now().Sub(t0), out, err)
	if h.act.cfg.Now().Before(landAt) {
		advance(landAt.Sub(h.act.cfg.Now()))
	}
	land()

	cordoned := 0
	for _, n := range names {
		if h.node(t, n).Spec.Unschedulable {
			cordoned++
		}
	}
	auditedA := 0
	for _, m := range append(decisions(t, h.pub), decisions(t, pub2)...) {
		t.Logf("published %s %s", m.Subject, m.ID)
		if m.D.Node == "a" && m.D.Verb == VerbCordoned {
			auditedA++
		}
	}
	t.Logf("a cordoned=%v, b cordoned=%v; nodes cordoned %d (cap 1); a's cordon audited %d times",
		h.node(t, "a").Spec.Unschedulable, h.node(t, "b").Spec.Unschedulable, cordoned, auditedA)
	if cordoned > 1 {
		t.Errorf("%d nodes cordoned under a cap of 1: leader 2 cordoned b while leader 1's cordon of a could still commit", cordoned)
	}
	if h.node(t, "a").Spec.Unschedulable && auditedA != 1 {
		t.Errorf("a's cordon happened (late commit) but was audited %d times, want once", auditedA)
	}
}

// TestActuatorRecovery: the recovery a new leader runs with carries the
// late-commit horizon, so the old leader's write in doubt that Happened finds
// committed late counts in the window from that read, not from its intent
// (actuate.TestSeedAndRecoverCountsALateCommitFromItsRead): counted from its
// intent, a commit 30 s after it, at 1 cordon per minute, let the new
// leader's next cordon through 30 s after the commit.
func TestActuatorRecovery(t *testing.T) {
	h := newHarness(t, seedPolicy("cordon"), false, Fleet{Managed: 10})
	r := h.act.Recovery()
	if r.LateCommit != h.act.horizon() || r.Happened == nil || r.Live == nil || r.Audit == nil ||
		r.Intents != actuate.IntentSubjects(h.act.cfg.Cluster, Service) || len(r.Outcomes) != len(ActionSubjects(h.act.cfg.Cluster)) {
		t.Fatalf("recovery %+v: want this actor's subjects, Happened, Live, the audit and LateCommit = the late-commit horizon %s",
			r, h.act.horizon())
	}
}

// TestAnsweredPatchIsNotWaitedFor: a patch answered with a refusal (403) or
// a 429 cannot commit later, so the actuator stores its intent's answer
// record (actuate.NewAnswer) and a new leader's Happened takes the unchanged
// node for "did not happen" at once; without the record it would wait the
// whole late-commit horizon, 85 s, idle. A
// write in doubt (504) and an intent OPS did not store get no record: the
// next leader waits for those, as it must.
func TestAnsweredPatchIsNotWaitedFor(t *testing.T) {
	gr := corev1.Resource("nodes")
	tests := []struct {
		name    string
		answer  error
		stored  bool
		answers int
		why     string
	}{
		{"403 refused", apierrors.NewForbidden(gr, "a", errors.New("denied")), true, 1, "refused"},
		{"429 throttled", apierrors.NewTooManyRequests("slow down", 1), true, 1, "throttled"},
		{"504, in doubt", apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), true, 0, ""},
		{"408, a proxy's: no proof", apierrors.NewGenericServerResponse(408, "patch", gr, "a", "", 0, true), true, 0, ""},
		{"403, intent not stored", apierrors.NewForbidden(gr, "a", errors.New("denied")), false, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := withPolicy(EffectCordon, func(*Policy) {})
			objs := append(pods("a", 100), apiNode("a"))
			h := newHarness(t, p, false, Fleet{Managed: 10}, objs...)
			in := actuatetest.NewJournal(tc.stored)
			h.act.cfg.Intents = in
			advance := clock(h)
			h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.answer
			})
			sa := mirrorOf(apiNode("a"), 100)
			_, _ = h.act.Apply(context.Background(), sa, false, Evaluate(p, sa, false))
			if in.Count() != 1 || len(in.Answers) != tc.answers {
				t.Fatalf("%d intents, %d answer records; want 1, %d", in.Count(), len(in.Answers), tc.answers)
			}
			if tc.answers == 0 {
				return
			}
			var answered events.Intent
			if _, err := envelope.Decode(in.Answers[0].Header, in.Answers[0].Data, events.TypeIntent, &answered); err != nil {
				t.Fatal(err)
			}
			_, _, intent := in.Intent(t, 0)
			if answered.Answered != tc.why || !answered.Time.Equal(intent.Time) || in.Answers[0].Subject != in.Msgs[0].Subject {
				t.Fatalf("answer record %+v on %s; want the intent's attempt answered %q on its subject", answered, in.Answers[0].Subject, tc.why)
			}
			// A new leader, 20 s later: the unchanged node, within the horizon.
			advance(20 * time.Second)
			pub2, ledger2 := &actuatetest.Publisher{}, NewLedger(false)
			act2 := NewActuator(h.client, pub2, record.NewFakeRecorder(10), ledger2, NewFleets(staticNodes{sa}, ledger2, p, h.client, 0),
				ActuatorConfig{Cluster: "prod", Policy: p, Identity: "replica-b", Now: h.act.cfg.Now}, NewMetrics(nil), zerolog.Nop())
			if ok, err := act2.Happened(context.Background(), answered); ok || err != nil {
				t.Fatalf("Happened(answered intent) = %v, %v; want false at once", ok, err)
			}
			if _, err := act2.Happened(context.Background(), intent); !errors.Is(err, actuate.ErrNotYetDecided) {
				t.Fatalf("Happened(intent without its answer) = %v; want not decided yet (within the horizon)", err)
			}
		})
	}
}

// TestHorizonFollowsServerRequestTimeout: a patch whose answer was lost
// stays in doubt until the late-commit horizon, and the horizon follows the
// API server's request timeout (kube.serverRequestTimeout): with the default
// 60 s the node unchanged at the default horizon means the patch did not
// happen and it is retried; against a server that runs requests for 120 s it
// may still commit then, so nothing is sent again; and a new leader's
// Happened waits as long.
func TestHorizonFollowsServerRequestTimeout(t *testing.T) {
	defaultHorizon := actuate.DefaultAPITimeout + actuate.DefaultServerRequestTimeout + actuate.LateCommitMargin
	tests := []struct {
		name          string
		serverTimeout time.Duration
		wantPatches   int
		wantDecided   bool // the new leader's Happened decides at once
	}{
		{"default 60s: decided at its horizon", 0, 2, true},
		{"120s: still in doubt then", 120 * time.Second, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := apiNode("a")
			p := seedPolicy("cordon")
			h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 100)...)...)
			if tc.serverTimeout > 0 { // else NewActuator's default
				h.act.cfg.ServerRequestTimeout = tc.serverTimeout
			}
			clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			h.act.cfg.Now = func() time.Time { return clock }
			in := &actuatetest.Intents{Stored: true}
			h.act.cfg.Intents = in
			patches := 0
			h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
				if patches++; patches == 1 {
					return true, nil, apierrors.NewServiceUnavailable("etcd leader change")
				}
				return false, nil, nil
			})
			state := mirrorOf(n, 100)
			if out, err := h.act.Apply(context.Background(), state, false, Evaluate(p, state, false)); err != nil || out.RequeueAfter <= 0 {
				t.Fatalf("first attempt: %+v, %v; want the 503 in doubt", out, err)
			}
			clock = clock.Add(defaultHorizon) // the node unchanged since
			_, _ = h.act.Apply(context.Background(), state, false, Evaluate(p, state, false))
			if patches != tc.wantPatches {
				t.Fatalf("%d patches at the default horizon, want %d", patches, tc.wantPatches)
			}
			_, _, first := in.Intent(t, 0)
			_, err := h.act.Happened(context.Background(), first)
			if decided := !errors.Is(err, actuate.ErrNotYetDecided); decided != tc.wantDecided {
				t.Fatalf("a new leader's Happened at the default horizon: %v; want decided = %v", err, tc.wantDecided)
			}
		})
	}
}

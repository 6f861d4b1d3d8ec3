package cordon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/events"
)

// TestActuatorLateCommitAfterSettlingRead: the API server answers the
// cordon's PATCH 504 (its timeout filter gave up; the handler goes on) and the
// etcd commit lands just after settle's read. The read still sees the version
// the patch was preconditioned on: that is no proof the write did not happen
// while it can still commit, so a's cordon stays in doubt (nothing published,
// its slot kept) and b's cordon waits for it. b's next attempt settles a's
// first: the node moved on and shows a's mark, so a's cordon is audited, and
// b's waits for the window (max 1).
func TestActuatorLateCommitAfterSettlingRead(t *testing.T) {
	a, b := apiNode("a"), apiNode("b")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)...)
	win := actuate.NewWindow(1, time.Minute)
	h.act.cfg.Limiter = win
	var pending k8stesting.Action // a's PATCH, answered 504, its commit not landed yet
	h.client.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if pending == nil && act.(k8stesting.PatchAction).GetName() == "a" && a.ResourceVersion == "41" {
			pending = act
			a.ResourceVersion = "" // once
			return true, nil, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
		}
		return false, nil, nil
	})
	h.client.PrependReactor("get", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if pending == nil || act.(k8stesting.GetAction).GetName() != "a" {
			return false, nil, nil
		}
		// The settling read is served, then the commit lands.
		obj, err := h.client.Tracker().Get(act.GetResource(), "", "a")
		if err != nil {
			t.Fatal(err)
		}
		late := pending
		pending = nil
		if _, _, err := k8stesting.ObjectReaction(h.client.Tracker())(late); err != nil {
			t.Fatal(err)
		}
		n, _ := h.client.Tracker().Get(act.GetResource(), "", "a")
		n.(*corev1.Node).ResourceVersion = "42"
		_ = h.client.Tracker().Update(act.GetResource(), n, "")
		return true, obj, nil
	})
	sa, sb := mirrorOf(apiNode("a"), 100), mirrorOf(b, 100)
	out, err := h.act.Apply(context.Background(), sa, false, Evaluate(p, sa, false))
	t.Logf("a: %+v %v", out, err)
	if got := decisions(t, h.pub); err != nil || out.RequeueAfter <= 0 || len(got) != 0 {
		t.Errorf("a: %+v %v, published %+v; want it in doubt (a settling read later, nothing published)", out, err, got)
	}
	for range 2 { // the first settles a's, the second finds the window full
		out, err = h.act.Apply(context.Background(), sb, false, Evaluate(p, sb, false))
		t.Logf("b: %+v %v", out, err)
	}
	cordoned := 0
	for _, name := range []string{"a", "b"} {
		if h.node(t, name).Spec.Unschedulable {
			cordoned++
		}
	}
	verb, _ := verbs(t, h)
	t.Logf("published %v; nodes cordoned %d; window holds %d", verb, cordoned, win.Len(h.act.cfg.Now()))
	if cordoned > 1 {
		t.Errorf("%d cordons applied in one window of max 1 (a's late commit was judged not applied and its slot given back)", cordoned)
	}
	if h.node(t, "a").Spec.Unschedulable && verb[VerbFailed] > 0 {
		t.Errorf("a is cordoned, but its cordon was published failed (%v)", verb)
	}
	if verb[VerbCordoned] != 1 || len(verb) != 1 || win.Len(h.act.cfg.Now()) != 1 {
		t.Errorf("published %v, window %d; want a's cordon audited once, its slot counted", verb, win.Len(h.act.cfg.Now()))
	}
}

// TestActuatorUnchangedNodeSettledAfterHorizon: a's PATCH is answered 504
// and never commits, and nothing else writes the node (no kubelet): its
// resourceVersion never moves. The write stays in doubt, its settling reads
// backing off (never a read at once again, never past the horizon), and no
// other cordon goes out, until the late-commit horizon has passed since the
// write was sent: then it is failed, once, and its slot stays counted.
func TestActuatorUnchangedNodeSettledAfterHorizon(t *testing.T) {
	a, b := apiNode("a"), apiNode("b")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)...)
	win := actuate.NewWindow(2, 10*time.Minute)
	h.act.cfg.Limiter = win
	advance := clock(h)
	sent := h.act.cfg.Now()
	horizon := h.act.horizon()
	loseAnswer(t, h, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0), false, 0)
	sa, sb := mirrorOf(a, 100), mirrorOf(b, 100)
	apply := func(s *events.NodeState) actuate.Outcome {
		t.Helper()
		out, err := h.act.Apply(context.Background(), s, false, Evaluate(p, s, false))
		if err != nil {
			t.Fatalf("Apply %s: %v", s.Name, err)
		}
		return out
	}
	out := apply(sa)
	reads := 0
	for len(decisions(t, h.pub)) == 0 {
		if out.RequeueAfter <= 0 || h.act.cfg.Now().Add(out.RequeueAfter).After(sent.Add(horizon)) {
			t.Fatalf("in doubt at %s after the write: %+v, want a settling read later, not past the horizon %s",
				h.act.cfg.Now().Sub(sent), out, horizon)
		}
		if reads++; reads > 50 {
			t.Fatalf("%d settling reads and still in doubt %s after the write (horizon %s)", reads, h.act.cfg.Now().Sub(sent), horizon)
		}
		if got := apply(sb); got.RequeueAfter <= 0 || len(h.writes()) != 1 {
			t.Fatalf("b while a is in doubt: %+v, %d patches; want it to wait, a's patch only", got, len(h.writes()))
		}
		advance(out.RequeueAfter)
		out = apply(sa)
	}
	if at := h.act.cfg.Now().Sub(sent); at < horizon {
		t.Errorf("settled %s after the write, before the horizon %s", at, horizon)
	}
	verb, _ := verbs(t, h)
	t.Logf("settled after %d reads at %s: published %v; window holds %d", reads, h.act.cfg.Now().Sub(sent), verb, win.Len(h.act.cfg.Now()))
	// a's retry (the same Apply) cordoned it: the window holds that and the
	// failed write's slot, kept; b's cordon waits.
	if verb[VerbFailed] != 1 || verb[VerbCordoned] != 1 || len(verb) != 2 || len(h.writes()) != 2 {
		t.Errorf("published %v, %d patches; want a's lost cordon failed once, then a's retry cordoned", verb, len(h.writes()))
	}
	if got := win.Len(h.act.cfg.Now()); got != 2 {
		t.Errorf("window holds %d, want 2 (the write that was in doubt still counts)", got)
	}
	if apply(sb).RequeueAfter <= 0 || h.node(t, "b").Spec.Unschedulable {
		t.Errorf("b cordoned in a window full with a's two writes")
	}
}

// TestActuatorLostUncordonThenCordonedBySomeoneElse: an uncordon's answer
// is lost, it was applied, and a person cordons the node before the settling
// read. The node moved on without opswire's mark, which only opswire
// removes: the uncordon happened, and is audited, whatever spec.unschedulable
// says now.
func TestActuatorLostUncordonThenCordonedBySomeoneElse(t *testing.T) {
	n := apiNode("a", ours(EffectCordon))
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{n}, pods("a", 10)...)...)
	lost := false
	h.client.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if lost {
			return false, nil, nil
		}
		lost = true
		if _, _, err := k8stesting.ObjectReaction(h.client.Tracker())(act); err != nil {
			t.Fatal(err)
		}
		got, _ := h.client.Tracker().Get(act.GetResource(), "", "a")
		person := got.(*corev1.Node)
		person.Spec.Unschedulable, person.ResourceVersion = true, "43"
		if err := h.client.Tracker().Update(act.GetResource(), person, ""); err != nil {
			t.Fatal(err)
		}
		return true, nil, context.DeadlineExceeded
	})
	s := mirrorOf(n, 10)
	d := Evaluate(p, s, true)
	if d.Action != ActionUncordon {
		t.Fatalf("decision %s, want an uncordon", d.Action)
	}
	if _, err := h.act.Apply(context.Background(), s, true, d); err != nil {
		t.Fatal(err)
	}
	if verb, _ := verbs(t, h); verb[VerbUncordoned] != 1 || len(verb) != 1 {
		t.Errorf("published %v; want the uncordon audited", verb)
	}
}

// TestLateCommitCountsInTheWindowFromItsCommit: window of
// 1 write per minute. a's cordon is answered 504 at t0 and its commit lands
// at t0+61 s (inside the late-commit horizon, 85 s: the server's handler runs
// for up to 60 s after it received the request). The slot of the write in
// doubt is held with the doubt and settled at the read that decides it
// (t0+62 s, b's next attempt): settled at the lost answer (t0), it would
// have left the window and b would be cordoned at once, two cordons one
// second apart under max 1 per minute.
//
// Want: a write shown applied later than its answer counts in the window from
// when it was seen applied (the latest it can have happened), so b waits.
func TestLateCommitCountsInTheWindowFromItsCommit(t *testing.T) {
	a, b := apiNode("a"), apiNode("b")
	p := seedPolicy("cordon")
	h := newHarness(t, p, false, Fleet{Managed: 10}, append([]runtime.Object{a, b}, append(pods("a", 100), pods("b", 100)...)...)...)
	win := actuate.NewWindow(1, time.Minute)
	h.act.cfg.Limiter = win
	advance := clock(h)
	t0 := h.act.cfg.Now()
	var late k8stesting.Action
	h.client.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if late == nil && act.(k8stesting.PatchAction).GetName() == "a" {
			late = act
			return true, nil, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0)
		}
		return false, nil, nil
	})
	var writes []time.Duration // when each cordon reached the API (after t0)
	h.client.PrependReactor("patch", "nodes", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.(k8stesting.PatchAction).GetName() == "b" {
			writes = append(writes, h.act.cfg.Now().Sub(t0))
		}
		return false, nil, nil
	})
	sa, sb := mirrorOf(a, 100), mirrorOf(b, 100)
	out, err := h.act.Apply(context.Background(), sa, false, Evaluate(p, sa, false))
	if err != nil || out.RequeueAfter <= 0 {
		t.Fatalf("a: %+v %v; want it in doubt", out, err)
	}
	// b waits on a's doubt meanwhile (its settling reads find a unchanged).
	for h.act.cfg.Now().Sub(t0) < 61*time.Second {
		out, err = h.act.Apply(context.Background(), sb, false, Evaluate(p, sb, false))
		if err != nil || out.RequeueAfter <= 0 || h.node(t, "b").Spec.Unschedulable {
			t.Fatalf("b at +%s while a is in doubt: %+v %v", h.act.cfg.Now().Sub(t0), out, err)
		}
		advance(min(out.RequeueAfter, t0.Add(61*time.Second).Sub(h.act.cfg.Now())))
	}
	// a's late commit lands at t0+61 s.
	if _, _, err := k8stesting.ObjectReaction(h.client.Tracker())(late); err != nil {
		t.Fatal(err)
	}
	writes = append(writes, 61*time.Second)
	n := h.node(t, "a")
	n.ResourceVersion = "42"
	if err := h.client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("nodes"), n, ""); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	out, err = h.act.Apply(context.Background(), sb, false, Evaluate(p, sb, false))
	verb, _ := verbs(t, h)
	t.Logf("b at +%s: %+v %v; published %v; cordons reached the API at %v (a's commit, then b's)", h.act.cfg.Now().Sub(t0), out, err, verb, writes)
	if h.node(t, "a").Spec.Unschedulable && h.node(t, "b").Spec.Unschedulable {
		t.Errorf("a (committed at +61s) and b (at +62s) both cordoned within one window of max 1 per minute: a's slot counted from its lost answer at +0s")
	}
	// The stall is visible: one write unanswered, then decided applied.
	if u, ap := testutil.ToFloat64(h.m.WritesInDoubt.WithLabelValues(actuate.DoubtUnanswered)), testutil.ToFloat64(h.m.WritesInDoubt.WithLabelValues(actuate.DoubtApplied)); u != 1 || ap != 1 {
		t.Errorf("opswire_cordon_writes_in_doubt_total: unanswered %v, applied %v; want 1, 1", u, ap)
	}
}

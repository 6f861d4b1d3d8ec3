package cleanup

import (
	"fmt"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/events"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func testPolicy() Policy {
	return Policy{
		Reasons:            reasonSet("Evicted", "OutOfcpu"),
		MinAge:             time.Minute,
		TerminatingTimeout: 5 * time.Minute,
		BrakeNotReadyShare: 1.0 / 3,
		Namespaces:         config.Namespaces{Exclude: []string{"kube-system"}},
		OptOutLabel:        events.LabelOptOut,
	}
}

// pod builds a pod state; mutate adjusts it.
func pod(mutate ...func(*events.PodState)) *events.PodState {
	p := &events.PodState{Op: events.OpUpsert, UID: "uid-1", Namespace: "apps", Name: "web-1",
		NodeName: "n1", Phase: "Running", CreationTimestamp: t0.Add(-time.Hour)}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func failed(reason string) func(*events.PodState) {
	return func(p *events.PodState) { p.Phase, p.Reason = "Failed", reason }
}

func deleting(at time.Time) func(*events.PodState) {
	return func(p *events.PodState) { p.DeletionTimestamp = &at }
}

func readyNode(status string) *events.NodeState { return &events.NodeState{Name: "n1", Ready: status} }

// notReadySince is node n1 with Ready=status since t.
func notReadySince(status string, t time.Time) *events.NodeState {
	return &events.NodeState{Name: "n1", Ready: status, ReadySince: &t}
}

// outOfService is node n1, not Ready, tainted out-of-service.
func outOfService() *events.NodeState {
	n := readyNode("False")
	n.Taints = []events.Taint{{Key: "other", Effect: "NoSchedule"}, {Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: "NoExecute"}}
	return n
}

// readyOutOfService is node n1, Ready again after a non-graceful shutdown,
// its out-of-service taint not yet removed.
func readyOutOfService() *events.NodeState {
	n := outOfService()
	n.Ready = "True"
	return n
}

func TestDecide(t *testing.T) {
	sts := func(p *events.PodState) { p.Owner = &events.Owner{Kind: "StatefulSet", Name: "db"} }
	ds := func(p *events.PodState) { p.Owner = &events.Owner{Kind: "DaemonSet", Name: "agent"} }
	finalizers := func(p *events.PodState) { p.Finalizers = 2 }
	optOut := func(p *events.PodState) { p.Labels = map[string]string{events.LabelOptOut: ""} }
	inNS := func(ns string) func(*events.PodState) { return func(p *events.PodState) { p.Namespace = ns } }
	young := func(p *events.PodState) { p.CreationTimestamp = t0.Add(-20 * time.Second) }
	failedAt := func(at time.Time) func(*events.PodState) { return func(p *events.PodState) { p.FailedAt = &at } }
	pvc := func(p *events.PodState) { p.Storage = true }
	graceZero := func(p *events.PodState) { zero := int64(0); p.DeletionGracePeriodSeconds = &zero }
	jobTracking := func(p *events.PodState) {
		p.Owner, p.Finalizers, p.JobTracking = &events.Owner{Kind: "Job", Name: "migrate"}, p.Finalizers+1, true
	}
	removeFinalizers := func(p *Policy) { p.RemoveFinalizers = true }
	oosUnknown := func() *events.NodeState { n := outOfService(); n.Ready = "Unknown"; return n }
	brakeOn := NodeCount{Nodes: 6, NotReady: 4}
	brakeEdge := NodeCount{Nodes: 6, NotReady: 2} // exactly a third: not more
	brakeOff := NodeCount{Nodes: 6, NotReady: 1}
	stuckSince := t0.Add(-6 * time.Minute) // deletionTimestamp 6m ago, timeout 5m: due

	tests := []struct {
		name     string
		policy   func(*Policy)
		pod      *events.PodState
		node     *events.NodeState
		nodes    NodeCount
		action   Action
		reason   string
		until    time.Time
		rmFinals bool
		remains  bool
	}{
		{name: "nil pod", pod: nil, action: None},
		{name: "running pod", pod: pod(), action: None},
		{name: "succeeded pod", pod: pod(func(p *events.PodState) { p.Phase = "Succeeded" }), action: None},
		{name: "failed with unlisted reason", pod: pod(failed("Error")), action: None},
		{name: "failed without reason", pod: pod(failed("")), action: None},
		{name: "evicted", pod: pod(failed("Evicted")), action: Delete, reason: ReasonFailedPod},
		{name: "configured extra reason", pod: pod(failed("OutOfcpu")), action: Delete, reason: ReasonFailedPod},
		{name: "evicted younger than minAge waits", pod: pod(failed("Evicted"), young), action: Wait, reason: ReasonFailedPod, until: t0.Add(40 * time.Second)},
		{name: "evicted minAge zero", policy: func(p *Policy) { p.MinAge = 0 }, pod: pod(failed("Evicted"), young), action: Delete, reason: ReasonFailedPod},
		{name: "evicted in excluded namespace", pod: pod(failed("Evicted"), inNS("kube-system")), action: None},
		{name: "evicted outside include list", policy: func(p *Policy) { p.Namespaces.Include = []string{"other"} }, pod: pod(failed("Evicted")), action: None},
		{name: "evicted opted out", pod: pod(failed("Evicted"), optOut), action: Skip, reason: ReasonOptedOut},
		{name: "opt-out disabled", policy: func(p *Policy) { p.OptOutLabel = "" }, pod: pod(failed("Evicted"), optOut), action: Delete, reason: ReasonFailedPod},
		{name: "evicted with finalizers: deletion requested, the pod remains", pod: pod(failed("Evicted"), finalizers), action: Delete, reason: ReasonFailedPod, remains: true},
		// removeFinalizers acts only on a pod stuck Terminating: the first
		// visit to a Failed pod deletes it and leaves the finalizers to
		// their controllers (the Job controller counts the pod, then lets go).
		{name: "evicted with finalizers, removal allowed: deletion requested, the finalizers kept", policy: removeFinalizers, pod: pod(failed("Evicted"), finalizers), action: Delete, reason: ReasonFailedPod, remains: true},
		{name: "evicted Job pod, removal allowed: its job-tracking finalizer kept", policy: removeFinalizers, pod: pod(failed("Evicted"), jobTracking), action: Delete, reason: ReasonFailedPod, remains: true},
		{name: "Failed pod left Terminating by its finalizers, past terminatingTimeout, removal allowed: cleared, then force-deleted", policy: removeFinalizers,
			pod: pod(failed("Evicted"), deleting(stuckSince), graceZero, finalizers), action: ForceDelete, reason: ReasonStuckTerminating, rmFinals: true},
		{name: "Failed pod left Terminating by its finalizers, before terminatingTimeout, removal allowed: waits", policy: removeFinalizers,
			pod: pod(failed("Evicted"), deleting(t0.Add(-time.Minute)), graceZero, finalizers), action: Wait, reason: ReasonStuckTerminating, until: t0.Add(4 * time.Minute)},
		// The DaemonSet and StatefulSet controllers delete their own Failed
		// pods (the DaemonSet controller with a backoff against a kubelet
		// that keeps rejecting them).
		{name: "Failed DaemonSet pod is left to its controller", pod: pod(failed("Evicted"), ds), node: readyNode("True"), action: None},
		{name: "Failed StatefulSet pod is left to its controller", pod: pod(failed("Evicted"), sts), node: readyNode("True"), action: None},
		{name: "Failed StatefulSet pod whose grace-0 delete was cut off is deleted again", pod: pod(failed("Evicted"), sts, deleting(t0), graceZero), action: Delete, reason: ReasonFailedPod},
		{name: "Failed StatefulSet pod stuck Terminating on a deleted node is force-deleted", pod: pod(failed("Evicted"), sts, deleting(stuckSince), finalizers), policy: removeFinalizers,
			action: ForceDelete, reason: ReasonStuckTerminating, rmFinals: true},
		{name: "reasons match case-insensitively", pod: pod(failed("EVICTED")), action: Delete, reason: ReasonFailedPod},
		{name: "configured reason in another case", policy: func(p *Policy) { p.Reasons = reasonSet("evicted") }, pod: pod(failed("Evicted")), action: Delete, reason: ReasonFailedPod},
		{name: "minAge counts from the failure, not the creation", pod: pod(failed("Evicted"), failedAt(t0.Add(-time.Second))), action: Wait, reason: ReasonFailedPod, until: t0.Add(59 * time.Second)},
		{name: "failed long enough ago", pod: pod(failed("Evicted"), failedAt(t0.Add(-time.Minute))), action: Delete, reason: ReasonFailedPod},
		{name: "a failure time before the creation counts from the creation", pod: pod(failed("Evicted"), young, failedAt(t0.Add(-2*time.Hour))), action: Wait, reason: ReasonFailedPod, until: t0.Add(40 * time.Second)},
		{name: "plain deletes ignore the brake", pod: pod(failed("Evicted")), nodes: brakeOn, action: Delete, reason: ReasonFailedPod},

		{name: "terminating before timeout waits", pod: pod(deleting(t0.Add(-time.Minute))), action: Wait, reason: ReasonStuckTerminating, until: t0.Add(4 * time.Minute)},
		{name: "terminating in grace period waits", pod: pod(deleting(t0.Add(30 * time.Second))), action: Wait, reason: ReasonStuckTerminating, until: t0.Add(5*time.Minute + 30*time.Second)},
		{name: "terminating exactly due", pod: pod(deleting(t0.Add(-5 * time.Minute))), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "stuck terminating", pod: pod(deleting(stuckSince)), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "Failed pod whose grace-0 delete was cut off is deleted again at once", pod: pod(failed("Evicted"), deleting(t0), graceZero), action: Delete, reason: ReasonFailedPod},
		{name: "cut-off delete of a Failed pod with an unlisted reason waits as terminating", pod: pod(failed("Error"), deleting(t0), graceZero), action: Wait, reason: ReasonStuckTerminating, until: t0.Add(5 * time.Minute)},
		{name: "Failed pod with finalizers and grace 0 is not a cut-off delete", pod: pod(failed("Evicted"), deleting(t0), graceZero, finalizers), action: Wait, reason: ReasonStuckTerminating, until: t0.Add(5 * time.Minute)},
		{name: "stuck Failed pod is force-deleted", pod: pod(failed("Evicted"), deleting(stuckSince)), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "force deletion disabled", policy: func(p *Policy) { p.TerminatingTimeout = 0 }, pod: pod(deleting(stuckSince)), action: None},
		{name: "stuck in excluded namespace", pod: pod(deleting(stuckSince), inNS("kube-system")), action: None},
		{name: "stuck opted out", pod: pod(deleting(stuckSince), optOut), action: Skip, reason: ReasonOptedOut},
		{name: "stuck with finalizers", pod: pod(deleting(stuckSince), finalizers), action: Skip, reason: ReasonHasFinalizers},
		{name: "stuck with finalizers, removal allowed", policy: removeFinalizers, pod: pod(deleting(stuckSince), finalizers), action: ForceDelete, reason: ReasonStuckTerminating, rmFinals: true},
		{name: "stuck with the Job's job-tracking finalizer, removal allowed: held", policy: removeFinalizers, pod: pod(deleting(stuckSince), jobTracking), action: Skip, reason: ReasonHasFinalizers},
		{name: "stuck with the job-tracking and another finalizer, removal allowed: held", policy: removeFinalizers, pod: pod(deleting(stuckSince), finalizers, jobTracking), action: Skip, reason: ReasonHasFinalizers},
		{name: "stuck Job pod with the job-tracking finalizer on a deleted node, removal allowed: held", policy: removeFinalizers, pod: pod(deleting(stuckSince), jobTracking), node: nil, action: Skip, reason: ReasonHasFinalizers},
		{name: "finalizers before timeout still wait", pod: pod(deleting(t0), finalizers), action: Wait, reason: ReasonStuckTerminating, until: t0.Add(5 * time.Minute)},
		{name: "statefulset on ready node", pod: pod(deleting(stuckSince), sts), node: readyNode("True"), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "statefulset on ready node allowed", policy: func(p *Policy) { p.AllowStatefulSetOnReadyNode = true }, pod: pod(deleting(stuckSince), sts), node: readyNode("True"), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "statefulset on not-ready node is held", pod: pod(deleting(stuckSince), sts), node: readyNode("False"), action: Skip, reason: ReasonNodeNotDown},
		{name: "statefulset on unreachable node is held", pod: pod(deleting(stuckSince), sts), node: readyNode("Unknown"), action: Skip, reason: ReasonNodeNotDown},
		{name: "statefulset on node without Ready condition is held", pod: pod(deleting(stuckSince), sts), node: readyNode(""), action: Skip, reason: ReasonNodeNotDown},
		{name: "statefulset on deleted node", pod: pod(deleting(stuckSince), sts), node: nil, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "statefulset on out-of-service node", pod: pod(deleting(stuckSince), sts), node: outOfService(), action: ForceDelete, reason: ReasonStuckTerminating},
		// PodGC's gcTerminating: the taint releases only a node that is not
		// Ready; a Ready one came back before the taint was removed.
		{name: "out-of-service taint on a Ready node holds", pod: pod(deleting(stuckSince), sts), node: readyOutOfService(), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "out-of-service taint on a Ready node holds a pvc pod", pod: pod(deleting(stuckSince), pvc), node: readyOutOfService(), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "out-of-service taint on an Unknown node releases", pod: pod(deleting(stuckSince), sts), node: func() *events.NodeState { n := outOfService(); n.Ready = "Unknown"; return n }(), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "out-of-service taint on a node without Ready condition releases", pod: pod(deleting(stuckSince), sts), node: func() *events.NodeState { n := outOfService(); n.Ready = ""; return n }(), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "allowStatefulSetOnReadyNode releases a Ready out-of-service node like any Ready node", policy: func(p *Policy) { p.AllowStatefulSetOnReadyNode = true }, pod: pod(deleting(stuckSince), sts), node: readyOutOfService(), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "plain pod on a Ready out-of-service node is force-deleted", pod: pod(deleting(stuckSince)), node: readyOutOfService(), action: ForceDelete, reason: ReasonStuckTerminating},
		// A DaemonSet pod holds its node: the DaemonSet controller starts a
		// second agent there as soon as the first is gone from the API.
		{name: "daemonset pod on ready node is held", pod: pod(deleting(stuckSince), ds), node: readyNode("True"), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "daemonset pod on unreachable node is held", pod: pod(deleting(stuckSince), ds), node: readyNode("Unknown"), action: Skip, reason: ReasonNodeNotDown},
		{name: "daemonset pod on not-ready node is held", pod: pod(deleting(stuckSince), ds), node: readyNode("False"), action: Skip, reason: ReasonNodeNotDown},
		{name: "daemonset pod on out-of-service node that is not Ready", pod: pod(deleting(stuckSince), ds), node: outOfService(), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "daemonset pod on a Ready out-of-service node is held", pod: pod(deleting(stuckSince), ds), node: readyOutOfService(), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "daemonset pod on deleted node", pod: pod(deleting(stuckSince), ds), node: nil, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "daemonset pod on ready node allowed", policy: func(p *Policy) { p.AllowStatefulSetOnReadyNode = true }, pod: pod(deleting(stuckSince), ds), node: readyNode("True"), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "daemonset pod released by statefulNotReadyTimeout", policy: func(p *Policy) { p.StatefulNotReadyTimeout = 10 * time.Minute },
			pod: pod(deleting(stuckSince), ds), node: notReadySince("Unknown", t0.Add(-10*time.Minute)), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "unscheduled daemonset pod is released", pod: pod(deleting(stuckSince), ds, func(p *events.PodState) { p.NodeName = "" }), node: nil, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "daemonset pod with finalizers reports the finalizers first", pod: pod(deleting(stuckSince), ds, finalizers), node: readyNode("True"), action: Skip, reason: ReasonHasFinalizers},
		{name: "pvc pod on unreachable node is held", pod: pod(deleting(stuckSince), pvc), node: readyNode("Unknown"), action: Skip, reason: ReasonNodeNotDown},
		{name: "pvc pod on ready node is held", pod: pod(deleting(stuckSince), pvc), node: readyNode("True"), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "pvc pod on out-of-service node", pod: pod(deleting(stuckSince), pvc), node: outOfService(), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "pvc pod on deleted node", pod: pod(deleting(stuckSince), pvc), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "pvc pod on ready node allowed", policy: func(p *Policy) { p.AllowStatefulSetOnReadyNode = true }, pod: pod(deleting(stuckSince), pvc), node: readyNode("True"), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "allowStatefulSetOnReadyNode does not release a NotReady node", policy: func(p *Policy) { p.AllowStatefulSetOnReadyNode = true }, pod: pod(deleting(stuckSince), sts), node: readyNode("Unknown"), action: Skip, reason: ReasonNodeNotDown},
		{name: "not ready longer than statefulNotReadyTimeout", policy: func(p *Policy) { p.StatefulNotReadyTimeout = 10 * time.Minute },
			pod: pod(deleting(stuckSince), sts), node: notReadySince("Unknown", t0.Add(-10*time.Minute)), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "not ready shorter than statefulNotReadyTimeout is held until then", policy: func(p *Policy) { p.StatefulNotReadyTimeout = 10 * time.Minute },
			pod: pod(deleting(stuckSince), sts), node: notReadySince("Unknown", t0.Add(-40*time.Second)), action: Skip, reason: ReasonNodeNotDown, until: t0.Add(9*time.Minute + 20*time.Second)},
		{name: "statefulNotReadyTimeout off by default", pod: pod(deleting(stuckSince), sts), node: notReadySince("Unknown", t0.Add(-24*time.Hour)), action: Skip, reason: ReasonNodeNotDown},
		{name: "statefulNotReadyTimeout without a transition time holds", policy: func(p *Policy) { p.StatefulNotReadyTimeout = time.Minute },
			pod: pod(deleting(stuckSince), sts), node: readyNode("Unknown"), action: Skip, reason: ReasonNodeNotDown},
		// Ready=False: the kubelet is alive and reporting, and the pod is
		// stuck because it cannot finish it; its containers may well run.
		{name: "statefulNotReadyTimeout does not release a Ready=False node", policy: func(p *Policy) { p.StatefulNotReadyTimeout = 10 * time.Minute },
			pod: pod(deleting(stuckSince), sts), node: notReadySince("False", t0.Add(-time.Hour)), action: Skip, reason: ReasonNodeNotDown},
		{name: "statefulNotReadyTimeout releases a node without Ready condition", policy: func(p *Policy) { p.StatefulNotReadyTimeout = 10 * time.Minute },
			pod: pod(deleting(stuckSince), sts), node: notReadySince("", t0.Add(-time.Hour)), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "statefulNotReadyTimeout does not apply to a Ready node", policy: func(p *Policy) { p.StatefulNotReadyTimeout = time.Minute },
			pod: pod(deleting(stuckSince), sts), node: notReadySince("True", t0.Add(-time.Hour)), action: Skip, reason: ReasonStatefulSetOnNode},
		{name: "brake holds a force deletion", pod: pod(deleting(stuckSince)), nodes: brakeOn, action: Skip, reason: ReasonMassNodeFailure},
		{name: "brake holds a force deletion on a deleted node", pod: pod(deleting(stuckSince), sts), nodes: brakeOn, action: Skip, reason: ReasonMassNodeFailure},
		// A person's out-of-service taint on a node that is not Ready
		// outranks the brake, as PodGC's gcTerminating ignores zone state.
		{name: "brake does not hold a statefulset pod on a NotReady out-of-service node", pod: pod(deleting(stuckSince), sts), node: oosUnknown(), nodes: brakeOn, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "brake does not hold a plain pod on a NotReady out-of-service node", pod: pod(deleting(stuckSince)), node: outOfService(), nodes: brakeOn, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "brake holds a plain pod on a Ready out-of-service node", pod: pod(deleting(stuckSince)), node: readyOutOfService(), nodes: brakeOn, action: Skip, reason: ReasonMassNodeFailure},
		{name: "brake holds a plain pod on an Unknown node without the taint", pod: pod(deleting(stuckSince)), node: readyNode("Unknown"), nodes: brakeOn, action: Skip, reason: ReasonMassNodeFailure},
		{name: "brake at exactly the share is off", pod: pod(deleting(stuckSince)), nodes: brakeEdge, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "brake released", pod: pod(deleting(stuckSince)), nodes: brakeOff, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "brake disabled with share 1", policy: func(p *Policy) { p.BrakeNotReadyShare = 1 }, pod: pod(deleting(stuckSince)), nodes: NodeCount{Nodes: 3, NotReady: 3}, action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "partition rule is reported before the brake", pod: pod(deleting(stuckSince), sts), node: readyNode("Unknown"), nodes: brakeOn, action: Skip, reason: ReasonNodeNotDown},
		{name: "finalizers are reported before the brake", pod: pod(deleting(stuckSince), finalizers), nodes: brakeOn, action: Skip, reason: ReasonHasFinalizers},
		{name: "brake does not hide a wait", pod: pod(deleting(t0)), nodes: brakeOn, action: Wait, reason: ReasonStuckTerminating, until: t0.Add(5 * time.Minute)},
		{name: "deployment pod on ready node", pod: pod(deleting(stuckSince), func(p *events.PodState) { p.Owner = &events.Owner{Kind: "Deployment", Name: "web"} }), node: readyNode("True"), action: ForceDelete, reason: ReasonStuckTerminating},
		{name: "opt-out wins over finalizers", pod: pod(deleting(stuckSince), finalizers, optOut), action: Skip, reason: ReasonOptedOut},
		{name: "finalizers reported before statefulset rule", pod: pod(deleting(stuckSince), finalizers, sts), node: readyNode("True"), action: Skip, reason: ReasonHasFinalizers},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			d := p.Decide(tc.pod, Facts{Node: tc.node, Now: t0, Nodes: tc.nodes})
			if d.Action != tc.action || d.Reason != tc.reason {
				t.Fatalf("Decide = %v/%q (%s), want %v/%q", d.Action, d.Reason, d.Message, tc.action, tc.reason)
			}
			if !d.Until.Equal(tc.until) {
				t.Errorf("Until = %v, want %v", d.Until, tc.until)
			}
			if d.RemoveFinalizers != tc.rmFinals {
				t.Errorf("RemoveFinalizers = %v, want %v", d.RemoveFinalizers, tc.rmFinals)
			}
			if d.Remains != tc.remains {
				t.Errorf("Remains = %v, want %v", d.Remains, tc.remains)
			}
			if d.Action != None && d.Message == "" {
				t.Error("a decision must explain itself in Message")
			}
			if (d.Action == Delete || d.Action == ForceDelete) && d.Want != d.Action {
				t.Errorf("Want = %v, want %v", d.Want, d.Action)
			}
		})
	}
}

// TestMinAgeNeverCountsFromBeforeCreation: failedAt is written on the
// kubelet's clock; a node clock 2 h behind must not make a pod created a
// minute ago count as failed 2 h ago. The failure is never earlier than the
// creation (the API server's clock), so minAge counts from the creation.
func TestMinAgeNeverCountsFromBeforeCreation(t *testing.T) {
	created := t0.Add(-time.Minute)
	failedAt := created.Add(-2 * time.Hour) // the node's clock, 2 h behind
	p := testPolicy()
	p.MinAge = 10 * time.Minute
	state := pod(failed("Evicted"), func(s *events.PodState) { s.CreationTimestamp, s.FailedAt = created, &failedAt })
	for _, tc := range []struct {
		now    time.Time
		action Action
	}{
		{now: t0, action: Wait},
		{now: created.Add(10*time.Minute - time.Second), action: Wait},
		{now: created.Add(10 * time.Minute), action: Delete},
	} {
		d := p.Decide(state, Facts{Now: tc.now})
		if d.Action != tc.action {
			t.Fatalf("at creation + %v: %v (%s), want %v", tc.now.Sub(created), d.Action, d.Message, tc.action)
		}
		if d.Action == Wait && !d.Until.Equal(created.Add(10*time.Minute)) {
			t.Fatalf("at creation + %v: wait until %v, want creation + 10m", tc.now.Sub(created), d.Until)
		}
	}
}

func TestNewPolicyFromConfig(t *testing.T) {
	c, err := config.Parse([]byte("delException: {reasons: [Evicted, Shutdown], terminatingTimeout: 30s, removeFinalizers: true}"))
	if err != nil {
		t.Fatal(err)
	}
	p := NewPolicy(c.DelException)
	if !p.Reasons["evicted"] || !p.Reasons["shutdown"] || p.Reasons["outofcpu"] {
		t.Errorf("Reasons = %v", p.Reasons)
	}
	if p.TerminatingTimeout != 30*time.Second || !p.RemoveFinalizers || p.OptOutLabel != events.LabelOptOut {
		t.Errorf("policy = %+v", p)
	}
}

func TestUnknownReasons(t *testing.T) {
	got := UnknownReasons([]string{"Evicted", "evicted", "OutOfcpu", "OutOfnvidia.com/gpu", "Shutdown", "NodeAffinity", "UnknownReason",
		"InitContainerRestartPolicyForbidden", "SupplementalGroupsPolicyNotSupported", "UnexpectedPredicateFailureType", "Evictd", "OutOf", "Foo"})
	if want := "[Evictd OutOf Foo]"; fmt.Sprint(got) != want {
		t.Fatalf("UnknownReasons = %v, want %v", got, want)
	}
}

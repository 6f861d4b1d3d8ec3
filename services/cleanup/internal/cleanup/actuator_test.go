package cleanup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/actuate/actuatetest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

// livePod is the API object matching pod(...) states.
func livePod(mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-1", UID: "uid-1", ResourceVersion: "7",
			CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func liveDeleting(p *corev1.Pod) {
	ts := metav1.NewTime(t0.Add(-6 * time.Minute))
	grace := int64(30)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &grace
	p.Status.Phase, p.Status.Reason = corev1.PodRunning, ""
}

func liveSTS(p *corev1.Pod) {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts", Controller: &yes}}
}

func liveDS(p *corev1.Pod) {
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds", Controller: &yes}}
}

type actuatorRig struct {
	client   *fake.Clientset
	pub      *actuatetest.Publisher
	recorder *record.FakeRecorder
	act      *Actuator
	metrics  *Metrics
}

func newRig(t *testing.T, policy Policy, dryRun bool, limiter *actuate.Window, objs ...runtime.Object) *actuatorRig {
	t.Helper()
	r := &actuatorRig{client: fake.NewClientset(objs...), pub: &actuatetest.Publisher{}, recorder: record.NewFakeRecorder(100), metrics: NewMetrics(nil)}
	if limiter == nil {
		limiter = actuate.NewWindow(100, time.Minute)
	}
	r.act = NewActuator(r.client, r.pub, r.recorder, r.metrics, zerolog.Nop(), ActuatorConfig{
		Cluster: "c1", Policy: policy, DryRun: dryRun, Limiter: limiter, Now: func() time.Time { return t0 }, WindowNow: func() time.Time { return t0 },
	})
	return r
}

// writes returns the verbs of write actions on the fake client (get is not a write).
func (r *actuatorRig) writes() []string {
	var out []string
	for _, a := range r.client.Actions() {
		if a.GetVerb() != "get" {
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

func (r *actuatorRig) eventsSeen() []string {
	var out []string
	for {
		select {
		case e := <-r.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// opsSummary renders each OPS message as "<subject> <id>".
func opsSummary(t *testing.T, msgs []*nats.Msg) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		var d events.CleanupDecision
		ev, err := envelope.Decode(m.Header, m.Data, events.TypeCleanup, &d)
		if err != nil {
			t.Fatalf("published message does not decode: %v", err)
		}
		if d.Pod == "" || d.Namespace == "" || d.Reason == "" || d.Verb == "" || d.Node == "" {
			t.Fatalf("payload lacks pod, namespace, node, verb or reason: %+v", d)
		}
		out = append(out, m.Subject+" "+ev.ID)
	}
	return out
}

func TestActuator(t *testing.T) {
	failedState := pod(failed("Evicted"))
	stuckState := pod(deleting(t0.Add(-6 * time.Minute)))
	stsState := pod(deleting(t0.Add(-6*time.Minute)), func(p *events.PodState) { p.Owner = &events.Owner{Kind: "StatefulSet", Name: "db"} })
	readyNodeObj := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	unknownNodeObj := readyNodeObj.DeepCopy()
	unknownNodeObj.Status.Conditions[0].Status = corev1.ConditionUnknown
	outOfServiceObj := unknownNodeObj.DeepCopy()
	outOfServiceObj.Spec.Taints = []corev1.Taint{{Key: events.TaintOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}}
	// readyOutOfServiceObj came back Ready after a non-graceful shutdown
	// before anyone removed its out-of-service taint.
	readyOutOfServiceObj := readyNodeObj.DeepCopy()
	readyOutOfServiceObj.Spec.Taints = outOfServiceObj.Spec.Taints
	// dsState is what the mirror holds of a stuck DaemonSet pod whose node is
	// not in the mirror (yet, or any more): the mirror decision is
	// ForceDelete, so only the live node can hold it.
	dsState := pod(deleting(t0.Add(-6*time.Minute)), func(p *events.PodState) { p.Owner = &events.Owner{Kind: "DaemonSet", Name: "agent"} })
	// pvcState is what the mirror holds of a stuck pod mounting a claim, with
	// its node not yet in the mirror (so the mirror decision is ForceDelete).
	pvcState := pod(deleting(t0.Add(-6*time.Minute)), func(p *events.PodState) { p.Storage = true })
	livePVC := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	}
	liveISCSI := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "lun", VolumeSource: corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{
			TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:disk", Lun: 0}}}}
	}
	withFinalizer := func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }
	graceZero := func(p *corev1.Pod) { zero := int64(0); p.DeletionGracePeriodSeconds = &zero }
	finalizerState := func(mutate ...func(*events.PodState)) *events.PodState {
		return pod(append([]func(*events.PodState){func(p *events.PodState) { p.Finalizers = 1 }}, mutate...)...)
	}
	removeFinalizers := func(p *Policy) { p.RemoveFinalizers = true }

	tests := []struct {
		name    string
		policy  func(*Policy)
		dryRun  bool
		state   *events.PodState
		objs    []runtime.Object
		reactor k8stesting.ReactionFunc // on delete pods
		nodes   NodeCount               // the controller's node count
		writes  []string
		ops     []string
		events  []string // prefixes
		outcome Outcome
		wantErr bool
	}{
		{
			name: "evicted pod is deleted", state: failedState, objs: []runtime.Object{livePod()},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.deleted.apps.web-1 cleanup/uid-1/deleted"},
			events: []string{"Normal CleanupDeleted FailedPod"},
		},
		{
			name: "stuck pod is force-deleted", state: stuckState, objs: []runtime.Object{livePod(liveDeleting)},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted StuckTerminating"},
		},
		{
			name: "evicted pod with finalizers: deletion requested, not deleted", state: finalizerState(failed("Evicted")),
			objs:   []runtime.Object{livePod(withFinalizer)},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.deletionrequested.apps.web-1 cleanup/uid-1/deletionrequested"},
			events: []string{"Normal CleanupDeletionRequested FailedPod"},
		},
		{
			// The finalizers' controllers get their chance first: only a
			// pod stuck Terminating has them cleared (next row).
			name: "evicted pod with finalizers, removal allowed: deletion requested, finalizers kept", policy: removeFinalizers,
			state: finalizerState(failed("Evicted")), objs: []runtime.Object{livePod(withFinalizer)},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.deletionrequested.apps.web-1 cleanup/uid-1/deletionrequested"},
			events: []string{"Normal CleanupDeletionRequested FailedPod"},
		},
		{
			name: "grace 0: clearing the finalizers removes the pod; audited, no DELETE", policy: removeFinalizers,
			state:  finalizerState(failed("Evicted"), deleting(t0.Add(-6*time.Minute))),
			objs:   []runtime.Object{livePod(liveDeleting, graceZero, withFinalizer)},
			writes: []string{"patch pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted StuckTerminating"},
		},
		{
			name: "finalizers cleared, then the DELETE finds it gone: still audited", policy: removeFinalizers,
			state: finalizerState(deleting(t0.Add(-6 * time.Minute))), objs: []runtime.Object{livePod(liveDeleting, withFinalizer)},
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-1")
			},
			writes: []string{"patch pods", "delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted"},
		},
		{
			name: "pvc pod on a live-Unknown node is held", state: pvcState,
			objs:   []runtime.Object{livePod(liveDeleting, livePVC), unknownNodeObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown"},
			events: []string{"Warning CleanupSkipped NodeNotConfirmedDown"},
		},
		{
			// The mirror's state predates the storage rule (or lost the
			// news): the live pod's volumes decide, and the node is read.
			name: "pod with an inline iSCSI volume on a live-Unknown node is held", state: stuckState,
			objs:   []runtime.Object{livePod(liveDeleting, liveISCSI), unknownNodeObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown"},
			events: []string{"Warning CleanupSkipped NodeNotConfirmedDown"},
		},
		{
			name: "statefulset pod on a live-Unknown node is held", state: stsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveSTS), unknownNodeObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown"},
			events: []string{"Warning CleanupSkipped NodeNotConfirmedDown"},
		},
		{
			name: "statefulset pod on a live out-of-service node is force-deleted", state: stsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveSTS), outOfServiceObj},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted"},
		},
		{
			name: "statefulset pod on a live-Ready node still tainted out-of-service is held", state: stsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveSTS), readyOutOfServiceObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/StatefulSetOnReadyNode"},
			events: []string{"Warning CleanupSkipped StatefulSetOnReadyNode"},
		},
		{
			name: "daemonset pod on a live-Ready node is held", state: dsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveDS), readyNodeObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/StatefulSetOnReadyNode"},
			events: []string{"Warning CleanupSkipped StatefulSetOnReadyNode"},
		},
		{
			name: "daemonset pod on a live-Unknown node is held", state: dsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveDS), unknownNodeObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/NodeNotConfirmedDown"},
			events: []string{"Warning CleanupSkipped NodeNotConfirmedDown"},
		},
		{
			name: "daemonset pod on a live out-of-service node that is not Ready is force-deleted", state: dsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveDS), outOfServiceObj},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted"},
		},
		{
			name: "brake engaged between the mirror decision and the write", state: stuckState, objs: []runtime.Object{livePod(liveDeleting)},
			nodes:  NodeCount{Nodes: 3, NotReady: 2},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/MassNodeFailure"},
			events: []string{"Warning CleanupSkipped MassNodeFailure"},
		},
		{
			name: "pod already gone", state: failedState,
		},
		{
			name: "pod recreated under the same name is never touched", state: failedState,
			objs: []runtime.Object{livePod(func(p *corev1.Pod) { p.UID = "uid-2" })},
		},
		{
			name: "live pod is running again: nothing", state: failedState,
			objs: []runtime.Object{livePod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })},
		},
		{
			name: "opt-out label only on the live pod", state: failedState,
			objs:   []runtime.Object{livePod(func(p *corev1.Pod) { p.Labels = map[string]string{events.LabelOptOut: "true"} })},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/OptedOut"},
			events: []string{"Warning CleanupSkipped OptedOut"},
		},
		{
			name: "dry run writes nothing", dryRun: true, state: stuckState, objs: []runtime.Object{livePod(liveDeleting)},
			ops: []string{"ops.c1.cleanup.dryrun.apps.web-1 cleanup/uid-1/dryrun/forcedelete"},
		},
		{
			name: "finalizers removed first when allowed", policy: func(p *Policy) { p.RemoveFinalizers = true },
			state:  pod(deleting(t0.Add(-6*time.Minute)), func(p *events.PodState) { p.Finalizers = 1 }),
			objs:   []runtime.Object{livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })},
			writes: []string{"patch pods", "delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted"},
		},
		{
			// The mirror's state predates the field (an older watcher):
			// the live finalizers decide.
			name: "stuck pod whose live finalizer is the Job controller's, removal allowed: held, nothing written", policy: removeFinalizers,
			state:  pod(deleting(t0.Add(-6*time.Minute)), func(p *events.PodState) { p.Finalizers = 1 }),
			objs:   []runtime.Object{livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"batch.kubernetes.io/job-tracking"} })},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/HasFinalizers"},
			events: []string{"Warning CleanupSkipped HasFinalizers"},
		},
		{
			// The brake holds everything but a node a person declared down:
			// the live re-check reads the node of every pod while braking.
			name: "brake on: a plain pod on a live out-of-service node that is not Ready is force-deleted", state: stuckState,
			objs: []runtime.Object{livePod(liveDeleting), outOfServiceObj}, nodes: NodeCount{Nodes: 6, NotReady: 4},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted"},
		},
		{
			name: "brake on: a plain pod on a live Unknown node without the taint is held", state: stuckState,
			objs: []runtime.Object{livePod(liveDeleting), unknownNodeObj}, nodes: NodeCount{Nodes: 6, NotReady: 4},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/MassNodeFailure"},
			events: []string{"Warning CleanupSkipped MassNodeFailure"},
		},
		{
			name: "statefulset pod on a live-Ready node is skipped", state: stsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveSTS), readyNodeObj},
			ops:    []string{"ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/StatefulSetOnReadyNode"},
			events: []string{"Warning CleanupSkipped StatefulSetOnReadyNode"},
		},
		{
			name: "statefulset pod on a deleted node is force-deleted", state: stsState,
			objs:   []runtime.Object{livePod(liveDeleting, liveSTS)},
			writes: []string{"delete pods"},
			ops:    []string{"ops.c1.cleanup.forcedeleted.apps.web-1 cleanup/uid-1/forcedeleted"},
			events: []string{"Warning CleanupForceDeleted"},
		},
		{
			name: "delete finds the pod gone: fine", state: failedState, objs: []runtime.Object{livePod()},
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "web-1")
			},
			writes: []string{"delete pods"},
		},
		{
			name: "precondition conflict: look again", state: failedState, objs: []runtime.Object{livePod()},
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "web-1", errors.New("precondition"))
			},
			writes: []string{"delete pods"}, outcome: Outcome{Retry: true},
		},
		{
			name: "delete refused: reported and retried", state: failedState, objs: []runtime.Object{livePod()},
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web-1", errors.New("denied by admission policy"))
			},
			writes:  []string{"delete pods"},
			ops:     []string{"ops.c1.cleanup.failed.apps.web-1 cleanup/uid-1/failed/delete"},
			events:  []string{"Warning CleanupFailed FailedPod"},
			outcome: Outcome{Retry: true}, wantErr: true,
		},
		{
			name: "delete throttled (429): not processed, retried, not reported", state: failedState, objs: []runtime.Object{livePod()},
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewTooManyRequests("slow down", 1)
			},
			writes:  []string{"delete pods"},
			outcome: Outcome{Retry: true}, wantErr: true,
		},
		{
			name: "delete answered 500: in doubt, nothing published until settled", state: failedState, objs: []runtime.Object{livePod()},
			reactor: func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewInternalError(errors.New("etcdserver: request timed out"))
			},
			writes:  []string{"delete pods"},
			outcome: Outcome{RequeueAfter: minRecheck}, // visited again to settle it
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			r := newRig(t, p, tc.dryRun, nil, tc.objs...)
			if tc.reactor != nil {
				r.client.PrependReactor("delete", "pods", tc.reactor)
			}
			d := p.Decide(tc.state, Facts{Now: t0})
			out, err := r.act.Handle(context.Background(), tc.state, d, Facts{Now: t0, Nodes: tc.nodes})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Handle error = %v, wantErr %v", err, tc.wantErr)
			}
			if out != tc.outcome {
				t.Errorf("outcome = %+v, want %+v", out, tc.outcome)
			}
			if got := strings.Join(r.writes(), ","); got != strings.Join(tc.writes, ",") {
				t.Errorf("writes = [%s], want [%s]", got, strings.Join(tc.writes, ","))
			}
			if got := strings.Join(opsSummary(t, r.pub.All()), "\n"); got != strings.Join(tc.ops, "\n") {
				t.Errorf("OPS =\n%s\nwant\n%s", got, strings.Join(tc.ops, "\n"))
			}
			evs := r.eventsSeen()
			if len(evs) != len(tc.events) {
				t.Fatalf("events = %q, want %d matching %q", evs, len(tc.events), tc.events)
			}
			for i, e := range evs {
				if !strings.HasPrefix(e, tc.events[i]) {
					t.Errorf("event %q, want prefix %q", e, tc.events[i])
				}
			}
		})
	}
}

// TestActuatorDeleteUsesPreconditions checks the exact delete options: UID and
// resourceVersion preconditions always, grace period 0 only for force.
func TestActuatorDeleteUsesPreconditions(t *testing.T) {
	tests := []struct {
		name  string
		state *events.PodState
		live  *corev1.Pod
		grace *int64
	}{
		{"delete", pod(failed("Evicted")), livePod(), nil},
		{"force delete", pod(deleting(t0.Add(-6 * time.Minute))), livePod(liveDeleting), new(int64)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, testPolicy(), false, nil, tc.live)
			if _, err := r.act.Handle(context.Background(), tc.state, testPolicy().Decide(tc.state, Facts{Now: t0}), Facts{Now: t0}); err != nil {
				t.Fatal(err)
			}
			var del k8stesting.DeleteActionImpl
			for _, a := range r.client.Actions() {
				if d, ok := a.(k8stesting.DeleteActionImpl); ok {
					del = d
				}
			}
			pre := del.DeleteOptions.Preconditions
			if pre == nil || pre.UID == nil || *pre.UID != types.UID("uid-1") || pre.ResourceVersion == nil || *pre.ResourceVersion != "7" {
				t.Fatalf("preconditions = %+v, want uid-1 / rv 7", pre)
			}
			g := del.DeleteOptions.GracePeriodSeconds
			if (g == nil) != (tc.grace == nil) || (g != nil && *g != *tc.grace) {
				t.Fatalf("grace = %v, want %v", g, tc.grace)
			}
			if _, err := r.client.CoreV1().Pods("apps").Get(context.Background(), "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Fatalf("pod still present: %v", err)
			}
		})
	}
}

func TestActuatorFinalizerPatchIsConditional(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	state := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers = 1 })
	r := newRig(t, p, false, nil, livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} }))
	if _, err := r.act.Handle(context.Background(), state, p.Decide(state, Facts{Now: t0}), Facts{Now: t0}); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.client.Actions() {
		if pa, ok := a.(k8stesting.PatchActionImpl); ok {
			var body struct {
				Metadata map[string]any `json:"metadata"`
			}
			if err := json.Unmarshal(pa.GetPatch(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Metadata["resourceVersion"] != "7" || body.Metadata["uid"] != "uid-1" {
				t.Fatalf("patch %s lacks the resourceVersion/uid precondition", pa.GetPatch())
			}
			if f, ok := body.Metadata["finalizers"]; !ok || f != nil {
				t.Fatalf("patch %s does not clear finalizers", pa.GetPatch())
			}
			return
		}
	}
	t.Fatal("no patch issued")
}

// TestActuatorPublishesOnce: skips, dry-run decisions and failures are
// published once per pod and reason, however often the pod is examined.
func TestActuatorPublishesOnce(t *testing.T) {
	tests := []struct {
		name   string
		dryRun bool
		state  *events.PodState
		live   *corev1.Pod
		gets   int // API GETs over three visits
	}{
		{"skip", false, pod(failed("Evicted"), func(p *events.PodState) { p.Labels = map[string]string{events.LabelOptOut: ""} }), livePod(), 0},
		{"dry run", true, pod(failed("Evicted")), livePod(), 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, testPolicy(), tc.dryRun, nil, tc.live)
			for range 3 {
				if _, err := r.act.Handle(context.Background(), tc.state, testPolicy().Decide(tc.state, Facts{Now: t0}), Facts{Now: t0}); err != nil {
					t.Fatal(err)
				}
			}
			if n := len(r.pub.All()); n != 1 {
				t.Fatalf("published %d times, want once", n)
			}
			if n := len(r.client.Actions()); n != tc.gets {
				t.Fatalf("%d API calls (%v), want %d", n, r.client.Actions(), tc.gets)
			}
			r.act.Forget(tc.state.UID)
			if _, err := r.act.Handle(context.Background(), tc.state, testPolicy().Decide(tc.state, Facts{Now: t0}), Facts{Now: t0}); err != nil {
				t.Fatal(err)
			}
			if n := len(r.pub.All()); n != 2 {
				t.Fatalf("after Forget published %d times in total, want 2", n)
			}
		})
	}
}

func TestActuatorRateLimitDefersWithoutAPICalls(t *testing.T) {
	a := livePod()
	b := livePod(func(p *corev1.Pod) { p.Name, p.UID = "web-2", "uid-2" })
	r := newRig(t, testPolicy(), false, actuate.NewWindow(1, time.Minute), a, b)
	sa := pod(failed("Evicted"))
	sb := pod(failed("Evicted"), func(p *events.PodState) { p.Name, p.UID = "web-2", "uid-2" })
	if out, err := r.act.Handle(context.Background(), sa, testPolicy().Decide(sa, Facts{Now: t0}), Facts{Now: t0}); err != nil || out != (Outcome{}) {
		t.Fatalf("first: %+v %v", out, err)
	}
	out, err := r.act.Handle(context.Background(), sb, testPolicy().Decide(sb, Facts{Now: t0}), Facts{Now: t0})
	if err != nil || out.RequeueAfter != time.Minute {
		t.Fatalf("second: %+v %v, want requeue after 1m", out, err)
	}
	if got := strings.Join(r.writes(), ","); got != "delete pods" {
		t.Fatalf("writes = %s, want one delete", got)
	}
	if n := len(r.client.Actions()); n != 2 {
		t.Fatalf("%d API calls, want 2 (get+delete of the first pod only)", n)
	}
}

// TestActuatorReleasesSlotWhenNothingDeleted: a pod that turned out to be gone
// does not use up the deletion budget.
func TestActuatorReleasesSlotWhenNothingDeleted(t *testing.T) {
	w := actuate.NewWindow(1, time.Minute)
	r := newRig(t, testPolicy(), false, w, livePod(func(p *corev1.Pod) { p.Name, p.UID = "web-2", "uid-2" }))
	gone := pod(failed("Evicted"))
	if _, err := r.act.Handle(context.Background(), gone, testPolicy().Decide(gone, Facts{Now: t0}), Facts{Now: t0}); err != nil {
		t.Fatal(err)
	}
	if wait := w.Reserve(t0); wait != 0 {
		t.Fatalf("slot not released: wait %v", wait)
	}
}

// TestActuatorWindowCountsTheWrite: a removal counts in the window from its
// write's answer, not from when its slot was taken. The first removal's
// intent times out (OPS down, 1 s on the window clock) between its slot and
// its DELETE; the second removal, 1 per 3 s, still reaches the API 3 s after
// the first DELETE, not 3 s after the first slot (which would be 2 s after
// the DELETE). The action time a
// new leader seeds it at is the DELETE's answer on the outcome Event, and
// the journal Event's writing (after the intent's timeout) on the
// CleanupIntent Event.
func TestActuatorWindowCountsTheWrite(t *testing.T) {
	const per = 3 * time.Second
	clock := actuatetest.NewClock(t0)
	w := actuate.NewWindow(1, per)
	r := newRig(t, testPolicy(), false, w, livePod(), livePod(func(p *corev1.Pod) { p.Name, p.UID = "web-2", "uid-2" }))
	r.act.cfg.WindowNow = clock.Now
	r.act.cfg.Intents = &actuatetest.SlowIntents{Clock: clock, Delay: actuate.DefaultIntentTimeout}
	var deletes []time.Time
	r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		deletes = append(deletes, clock.Now())
		return false, nil, nil
	})
	for _, s := range []*events.PodState{
		pod(failed("Evicted")),
		pod(failed("Evicted"), func(s *events.PodState) { s.Name, s.UID = "web-2", "uid-2" }),
	} {
		d := testPolicy().Decide(s, Facts{Now: t0})
		for range 3 {
			out, err := r.act.Handle(context.Background(), s, d, Facts{Now: t0})
			if err != nil {
				t.Fatal(err)
			}
			if out.RequeueAfter == 0 {
				break
			}
			clock.Add(out.RequeueAfter) // what the controller's AddAfter does
		}
	}
	if len(deletes) != 2 {
		t.Fatalf("%d DELETEs, want 2", len(deletes))
	}
	if gap := deletes[1].Sub(deletes[0]); gap < per {
		t.Errorf("cap 1 per %v, but the two DELETEs reached the API %v apart (the first one counted from before its intent timeout)", per, gap)
	}
	outcome := r.eventsSeen()
	if len(outcome) != 2 || !strings.Contains(outcome[0], AnnotationActionTime+":"+actionTime(deletes[0])) ||
		!strings.Contains(outcome[1], AnnotationActionTime+":"+actionTime(deletes[1])) {
		t.Errorf("%d outcome Events, want each with its DELETE's action time %s, %s: %q", len(outcome), actionTime(deletes[0]), actionTime(deletes[1]), outcome)
	}
	written := t0.Add(actuate.DefaultIntentTimeout)
	if evs := r.createdEvents(); len(evs) != 1 || evs[0].Annotations[AnnotationActionTime] != actionTime(written) {
		t.Errorf("CleanupIntent Events %+v, want one with action time %s (when it was written, after the intent's timeout)", evs, actionTime(written))
	}
}

// TestActuatorFinalizerRemovalCountsAgainstCap: pods the API server removes
// during the finalizer update take a deletion slot each (nothing is given
// back), so the cap holds: 2 per window, the third waits.
func TestActuatorFinalizerRemovalCountsAgainstCap(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	var objs []runtime.Object
	var states []*events.PodState
	for i := range 3 {
		name, uid := "web-"+strconv.Itoa(i), types.UID("uid-"+strconv.Itoa(i))
		objs = append(objs, livePod(liveDeleting, func(p *corev1.Pod) {
			zero := int64(0)
			p.Name, p.UID, p.DeletionGracePeriodSeconds, p.Finalizers = name, uid, &zero, []string{"example.com/hold"}
		}))
		states = append(states, pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Name, s.UID, s.Finalizers = name, string(uid), 1 }))
	}
	r := newRig(t, p, false, actuate.NewWindow(2, time.Minute), objs...)
	var outs []Outcome
	for _, s := range states {
		out, err := r.act.Handle(context.Background(), s, p.Decide(s, Facts{Now: t0}), Facts{Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, out)
	}
	if outs[0] != (Outcome{}) || outs[1] != (Outcome{}) || outs[2].RequeueAfter != time.Minute {
		t.Fatalf("outcomes %+v, want the third deferred by the window", outs)
	}
	if got := len(r.pub.All()); got != 2 {
		t.Fatalf("%d audited, want 2", got)
	}
}

// TestActuatorJournalsBeforeTheWrite: the intent is stored before the
// DELETE (and before the finalizer patch), carries the UID, the verb and
// the outcome message that is then published byte for byte; an intent the
// journal could not store does not hold the removal back. A skip writes
// no intent.
func TestActuatorJournalsBeforeTheWrite(t *testing.T) {
	for _, stored := range []bool{true, false} {
		t.Run("stored="+strconv.FormatBool(stored), func(t *testing.T) {
			r := newRig(t, testPolicy(), false, nil, livePod())
			in := actuatetest.NewJournal(stored)
			r.act.cfg.Intents = in
			var atDelete []int
			r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				atDelete = append(atDelete, in.Count())
				return false, nil, nil
			})
			st := pod(failed("Evicted"))
			if _, err := r.act.Handle(context.Background(), st, testPolicy().Decide(st, Facts{Now: t0}), Facts{Now: t0}); err != nil {
				t.Fatal(err)
			}
			if len(atDelete) != 1 || atDelete[0] != 1 {
				t.Fatalf("intents stored when the DELETE ran: %v, want [1]", atDelete)
			}
			msg := in.Msgs[0]
			var intent events.Intent
			ev, err := envelope.Decode(msg.Header, msg.Data, events.TypeIntent, &intent)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != "ops.c1.cleanup.intent.apps.web-1" || ev.ID != actuate.IntentID("cleanup/uid-1/deleted", intent.Time) ||
				msg.Header.Get(envelope.HeaderMsgID) != ev.ID || intent.UID != "uid-1" || intent.Action != VerbDeleted ||
				intent.Namespace != "apps" || intent.Name != "web-1" || intent.Kind != "Pod" || intent.Actor != Service {
				t.Fatalf("intent %s %s %+v", msg.Subject, ev.ID, intent)
			}
			outs := r.pub.All()
			if len(outs) != 1 {
				t.Fatalf("%d outcomes published, want 1", len(outs))
			}
			out := outs[0]
			if intent.Outcome.Subject != out.Subject || intent.Outcome.ID != out.Header.Get(envelope.HeaderMsgID) ||
				string(intent.Outcome.Data) != string(out.Data) || intent.Outcome.Type != events.TypeCleanup {
				t.Fatalf("intent carries %s %s %s; published %s %s %s", intent.Outcome.Subject, intent.Outcome.ID, intent.Outcome.Data,
					out.Subject, out.Header.Get(envelope.HeaderMsgID), out.Data)
			}
		})
	}
	t.Run("finalizer patch", func(t *testing.T) {
		p := testPolicy()
		p.RemoveFinalizers = true
		r := newRig(t, p, false, nil, livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"x/y"} }))
		in := actuatetest.NewJournal(true)
		r.act.cfg.Intents = in
		var atPatch []int
		r.client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			atPatch = append(atPatch, in.Count())
			return false, nil, nil
		})
		st := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers = 1 })
		if _, err := r.act.Handle(context.Background(), st, p.Decide(st, Facts{Now: t0}), Facts{Now: t0}); err != nil {
			t.Fatal(err)
		}
		if len(atPatch) != 1 || atPatch[0] != 1 || in.Count() != 1 {
			t.Fatalf("intents at the patch %v, total %d; want one, before the patch", atPatch, in.Count())
		}
	})
	t.Run("skip", func(t *testing.T) {
		r := newRig(t, testPolicy(), false, nil)
		in := actuatetest.NewJournal(true)
		r.act.cfg.Intents = in
		st := pod(failed("Evicted"))
		r.act.Handle(context.Background(), st, Decision{Action: Skip, Reason: "opted-out"}, Facts{Now: t0})
		if in.Count() != 0 {
			t.Fatalf("%d intents for a skip", in.Count())
		}
	})
}

// TestActuatorHappened: the live check of a new leader for an intent
// without its outcome.
func TestActuatorHappened(t *testing.T) {
	tests := []struct {
		name string
		verb string
		objs []runtime.Object
		want bool
	}{
		{"gone", VerbDeleted, nil, true},
		{"recreated under the same name", VerbDeleted, []runtime.Object{livePod(func(p *corev1.Pod) { p.UID = "uid-2" })}, true},
		{"same pod still there", VerbDeleted, []runtime.Object{livePod()}, false},
		{"same pod, deletion pending", VerbForceDeleted, []runtime.Object{livePod(liveDeleting)}, false},
		{"deletion requested, finalizers hold the pod", VerbDeletionRequested, []runtime.Object{livePod(liveDeleting)}, true},
		{"deletion requested, pod not deleting", VerbDeletionRequested, []runtime.Object{livePod()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, testPolicy(), false, nil, tc.objs...)
			got, err := r.act.Happened(context.Background(), events.Intent{Action: tc.verb, Namespace: "apps", Name: "web-1", UID: "uid-1"})
			if err != nil || got != tc.want {
				t.Fatalf("Happened = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	r := newRig(t, testPolicy(), false, nil)
	r.client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("API down")
	})
	if _, err := r.act.Happened(context.Background(), events.Intent{Namespace: "apps", Name: "web-1", UID: "uid-1"}); err == nil {
		t.Fatal("an API error must fail the check (the recovery retries)")
	}
}

// TestActuatorDoesNotReReadWhatItSawGo: a pod this leader removed (or found
// gone) is not re-read when the mirror, behind, still shows it: above all the
// API server's own deletion update of a Failed pod (deletionTimestamp, grace
// 0), written just before the pod is removed, which the watcher publishes and
// which decides Delete again (an interrupted delete). Before, each such
// message cost a GET answered 404 (~0.75 extra requests per deletion in the
// reaction benchmark). A deletion that leaves the pod (finalizers kept) is
// looked at again; the expiry ends the memory, the mirror removing the pod
// (Forget) does not.
func TestActuatorDoesNotReReadWhatItSawGo(t *testing.T) {
	zero := int64(0)
	deletionUpdate := pod(failed("Evicted"), deleting(t0), func(p *events.PodState) { p.DeletionGracePeriodSeconds = &zero })
	if d := testPolicy().Decide(deletionUpdate, Facts{Now: t0}); d.Action != Delete {
		t.Fatalf("the deletion update decides %v, want delete (the interrupted-delete rule)", d.Action)
	}
	withFinalizers := func(p *events.PodState) { p.Finalizers = 1 }
	tests := []struct {
		name  string
		live  []runtime.Object
		first *events.PodState
		later []*events.PodState // the mirror's states after the first visit
		gets  int                // pod GETs over all visits
		dels  int
		// deleteGone answers every DELETE 404 (removed by someone else
		// between the re-read and the DELETE).
		deleteGone bool
	}{
		{"own deletion", []runtime.Object{livePod()}, pod(failed("Evicted")),
			[]*events.PodState{deletionUpdate, pod(failed("Evicted"))}, 1, 1, false},
		{"found gone", nil, pod(failed("Evicted")), []*events.PodState{deletionUpdate, pod(failed("Evicted"))}, 1, 0, false},
		{"recreated under the name", []runtime.Object{livePod(func(p *corev1.Pod) { p.UID = "uid-2" })}, pod(failed("Evicted")),
			[]*events.PodState{pod(failed("Evicted"))}, 1, 0, false},
		{"deletion requested: the pod stays", []runtime.Object{livePod(func(p *corev1.Pod) { p.Finalizers = []string{"example.com/keep"} })},
			pod(failed("Evicted"), withFinalizers), []*events.PodState{pod(failed("Evicted"), withFinalizers)}, 2, 1, false},
		{"a DELETE answered 404", []runtime.Object{livePod()}, pod(failed("Evicted")),
			[]*events.PodState{deletionUpdate, pod(failed("Evicted"))}, 1, 1, true},
	}
	count := func(r *actuatorRig, verb string) int {
		n := 0
		for _, a := range r.client.Actions() {
			if a.GetVerb() == verb && a.GetResource().Resource == "pods" {
				n++
			}
		}
		return n
	}
	handle := func(t *testing.T, r *actuatorRig, s *events.PodState) {
		t.Helper()
		if _, err := r.act.Handle(context.Background(), s, testPolicy().Decide(s, Facts{Now: t0}), Facts{Now: t0}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, testPolicy(), false, nil, tc.live...)
			if tc.deleteGone {
				r.client.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewNotFound(corev1.Resource("pods"), "web-1")
				})
			}
			handle(t, r, tc.first)
			published := len(r.pub.All())
			for _, s := range tc.later {
				handle(t, r, s)
			}
			if gets, dels := count(r, "get"), count(r, "delete"); gets != tc.gets || dels != tc.dels {
				t.Fatalf("%d GETs and %d DELETEs of pods (%v), want %d and %d", gets, dels, r.client.Actions(), tc.gets, tc.dels)
			}
			if tc.gets == 1 && len(r.pub.All()) != published {
				t.Fatalf("the later visits published %d messages, want none", len(r.pub.All())-published)
			}
		})
	}

	// The reaction benchmark caught one deletion in 200 costing a GET answered
	// 404 this way (3.005 requests per deletion): the deletion update queued
	// the key, a worker took it and found the pod in the mirror, and the
	// mirror removed the pod (Forget) before the worker reached Handle.
	t.Run("the mirror removes the pod while a visit is on its way", func(t *testing.T) {
		r := newRig(t, testPolicy(), false, nil, livePod())
		handle(t, r, pod(failed("Evicted"))) // GET, DELETE
		r.act.Forget("uid-1")                // the mirror's tombstone, as the worker is on its way
		handle(t, r, deletionUpdate)         // the visit decided on the mirror's state of just before
		if gets, dels := count(r, "get"), count(r, "delete"); gets != 1 || dels != 1 {
			t.Fatalf("%d GETs and %d DELETEs of pods, want 1 and 1 (a UID seen gone stays known after Forget)", gets, dels)
		}
	})

	t.Run("expiry", func(t *testing.T) {
		r := newRig(t, testPolicy(), false, nil)
		now := t0
		r.act.cfg.WindowNow = func() time.Time { return now }
		handle(t, r, pod(failed("Evicted"))) // GET: 404
		handle(t, r, deletionUpdate)         // remembered: no GET
		r.act.Forget("uid-1")
		handle(t, r, deletionUpdate) // still remembered after the mirror removed the pod
		if n := count(r, "get"); n != 1 {
			t.Fatalf("%d GETs, want 1", n)
		}
		now = now.Add(removedTTL)
		handle(t, r, deletionUpdate) // between ttl and 2×ttl: still remembered
		if n := count(r, "get"); n != 1 {
			t.Fatalf("%d GETs after one ttl, want still 1", n)
		}
		now = now.Add(removedTTL)
		handle(t, r, deletionUpdate) // expired: re-read
		if n := count(r, "get"); n != 2 {
			t.Fatalf("%d GETs after two ttl, want 2 (expired)", n)
		}
	})
}

// TestActuatorRereadsAPodAWebhookKeeps: a mutating admission webhook puts a
// finalizer back on every pod update (the PATCH that clears them answers 200
// with a finalizer still there); the DELETE with grace 0 then answers 200 and
// leaves the pod Terminating. The pod is still there, so the actuator must not
// remember its UID as gone: the mirror's next state of it is looked at again.
func TestActuatorRereadsAPodAWebhookKeeps(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	live := livePod(liveDeleting, func(p *corev1.Pod) { p.Finalizers = []string{"example.com/hold"} })
	r := newRig(t, p, false, nil, live)
	tracker := r.client.Tracker()
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	r.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o, _ := tracker.Get(gvr, "apps", "web-1")
		cur := o.(*corev1.Pod).DeepCopy()
		cur.Finalizers = []string{"example.com/webhook"} // the webhook's mutation
		cur.ResourceVersion = "8"
		_ = tracker.Update(gvr, cur, "apps")
		return true, cur, nil
	})
	r.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o, _ := tracker.Get(gvr, "apps", "web-1")
		cur := o.(*corev1.Pod).DeepCopy()
		if len(cur.Finalizers) > 0 { // the API server keeps a pod with finalizers: 200, still there
			zero := int64(0)
			cur.DeletionGracePeriodSeconds = &zero
			cur.ResourceVersion = "9"
			_ = tracker.Update(gvr, cur, "apps")
			return true, nil, nil
		}
		return false, nil, nil
	})
	state := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers = 1 })
	d := p.Decide(state, Facts{Now: t0})
	if d.Action != ForceDelete || !d.RemoveFinalizers {
		t.Fatalf("decision %+v", d)
	}
	if _, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); err == nil {
		t.Fatal("a patch answered with finalizers still set must fail (retried with backoff)")
	}
	if _, err := tracker.Get(gvr, "apps", "web-1"); err != nil {
		t.Fatalf("setup: the pod should still exist: %v", err)
	}
	n := len(r.client.Actions())
	// The mirror's next state: the same pod, still Terminating with a finalizer, grace 0.
	zero := int64(0)
	next := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) {
		s.Finalizers = 1
		s.DeletionGracePeriodSeconds = &zero
		s.ResourceVersion = "9"
	})
	nd := p.Decide(next, Facts{Now: t0})
	if nd.Action != ForceDelete {
		t.Fatalf("next decision %+v", nd)
	}
	r.act.Handle(context.Background(), next, nd, Facts{Now: t0})
	if got := len(r.client.Actions()) - n; got == 0 {
		t.Fatalf("the pod still exists (Terminating, finalizer %v) but its next ForceDelete decision made no API call: UID remembered as removed", []string{"example.com/webhook"})
	}
}

// TestRemovedUIDLifetime: however sparse the calls, a UID is remembered for
// at most 2×ttl.
func TestRemovedUIDLifetime(t *testing.T) {
	r := newRemovedUIDs(removedTTL)
	r.add("u", t0)
	r.has("x", t0.Add(2*removedTTL-time.Second)) // one unrelated call: rotates
	at := t0.Add(3*removedTTL - 2*time.Second)
	if r.has("u", at) {
		t.Fatalf("uid added at t0 still remembered %v later (> 2×ttl = %v)", at.Sub(t0), 2*removedTTL)
	}
}

// TestActuatorDryRunSkipHasItsOwnID: a dry-run replica runs beside the real
// actor (its own Lease); its skip of a pod must not take the real skip's
// Nats-Msg-Id, or the stream drops whichever of the two comes second.
func TestActuatorDryRunSkipHasItsOwnID(t *testing.T) {
	optedOut := func(p *corev1.Pod) { p.Labels = map[string]string{events.LabelOptOut: ""} }
	state := pod(failed("Evicted"), func(s *events.PodState) { s.Labels = map[string]string{events.LabelOptOut: ""} })
	d := testPolicy().Decide(state, Facts{Now: t0})
	if d.Action != Skip {
		t.Fatalf("decision %+v", d)
	}
	ids := map[bool]string{}
	for _, dry := range []bool{true, false} {
		r := newRig(t, testPolicy(), dry, nil, livePod(optedOut))
		if _, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); err != nil {
			t.Fatal(err)
		}
		msgs := r.pub.All()
		if len(msgs) != 1 {
			t.Fatalf("dryRun=%v: %d messages", dry, len(msgs))
		}
		ids[dry] = msgs[0].Subject + " " + msgs[0].Header.Get(nats.MsgIdHdr)
	}
	if ids[true] == ids[false] {
		t.Errorf("the dry-run replica's skip and the real actor's skip are one message for the stream (%s): the second one is dropped as a duplicate", ids[true])
	}
	if want := "ops.c1.cleanup.skipped.apps.web-1 cleanup/uid-1/skipped/OptedOut"; ids[false] != want || ids[true] != want+"/dryrun" {
		t.Errorf("ids: real %q, dry run %q; want %q and %q", ids[false], ids[true], want, want+"/dryrun")
	}
}

// webhookRig is a pod stuck Terminating with a finalizer, removeFinalizers
// true, and a mutating webhook that puts a finalizer back on every update
// of the pod (the PATCH that clears them answers 200 with one still there).
// A DELETE of a pod with finalizers answers 200 and leaves it (grace 0).
func webhookRig(t *testing.T, grace int64) (*actuatorRig, Policy, *actuate.Window) {
	t.Helper()
	p := testPolicy()
	p.RemoveFinalizers = true
	live := livePod(liveDeleting, func(p *corev1.Pod) {
		p.Finalizers = []string{"example.com/hold"}
		p.DeletionGracePeriodSeconds = &grace
	})
	w := actuate.NewWindow(10, time.Minute)
	r := newRig(t, p, false, w, live)
	webhookPutsFinalizersBack(r)
	return r, p, w
}

// webhookPutsFinalizersBack makes every pod PATCH of the rig's fake API
// answer with the finalizer example.com/webhook set (a mutating webhook),
// and a DELETE of a pod with finalizers mark it deleted (grace 0) and leave it.
func webhookPutsFinalizersBack(r *actuatorRig) {
	tracker := r.client.Tracker()
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	r.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o, _ := tracker.Get(gvr, "apps", "web-1")
		cur := o.(*corev1.Pod).DeepCopy()
		cur.Finalizers = []string{"example.com/webhook"} // the webhook's mutation
		_ = tracker.Update(gvr, cur, "apps")
		return true, cur, nil
	})
	r.client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o, _ := tracker.Get(gvr, "apps", "web-1")
		cur := o.(*corev1.Pod).DeepCopy()
		if len(cur.Finalizers) > 0 {
			ts, zero := metav1.NewTime(t0), int64(0)
			if cur.DeletionTimestamp == nil {
				cur.DeletionTimestamp = &ts
			}
			cur.DeletionGracePeriodSeconds = &zero
			_ = tracker.Update(gvr, cur, "apps")
			return true, nil, nil
		}
		return false, nil, nil
	})
}

// webhookOutcome checks what a pod whose finalizers a webhook puts back got
// over its visits: no DELETE, no removal audit (OPS, Event, metric), no
// slot held, and failed (id cleanup/uid-1/failed/<action>) reported once,
// naming the finalizer.
func webhookOutcome(t *testing.T, r *actuatorRig, w *actuate.Window, action string) {
	t.Helper()
	if _, err := r.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "apps", "web-1"); err != nil {
		t.Fatalf("setup: the pod should still exist: %v", err)
	}
	var removals, failures []string
	for _, m := range r.pub.All() {
		switch id := m.Header.Get(nats.MsgIdHdr); {
		case strings.Contains(m.Subject, ".failed."):
			failures = append(failures, id)
			if !strings.Contains(string(m.Data), "example.com/webhook") {
				t.Errorf("the failure does not name the finalizer put back: %s", m.Data)
			}
		default:
			removals = append(removals, m.Subject+" "+id)
		}
	}
	evs := strings.Join(r.eventsSeen(), "\n")
	removed := testutil.ToFloat64(r.metrics.Decisions.WithLabelValues(VerbForceDeleted, ReasonStuckTerminating)) +
		testutil.ToFloat64(r.metrics.Decisions.WithLabelValues(VerbDeleted, ReasonFailedPod))
	if len(removals) > 0 || strings.Contains(evs, EventForceDeleted) || strings.Contains(evs, EventDeleted) || removed > 0 || w.Len(t0) > 0 || r.countDeletes() > 0 {
		t.Errorf("the pod is still there (a webhook re-adds its finalizer), yet: removal audits %v, Events %q, %d slots held, %d DELETEs, removal decisions %v",
			removals, evs, w.Len(t0), r.countDeletes(), removed)
	}
	if strings.Join(failures, ",") != "cleanup/uid-1/failed/"+action || strings.Count(evs, "CleanupFailed") != 1 {
		t.Errorf("failures %v, Events %q; want cleanup/uid-1/failed/%s once with one CleanupFailed Event", failures, evs, action)
	}
}

// TestActuatorFinalizersPutBackStuckPod: when a mutating webhook re-adds a
// finalizer on the PATCH that cleared them, the pod stays (Terminating).
// It is reported failed once and nothing is counted, not published
// forcedeleted with its slot kept on every visit. Both shapes: grace 30 (PATCH,
// then a DELETE that would only mark it) and grace 0 (the PATCH would have
// removed it: deletedByUpdate).
func TestActuatorFinalizersPutBackStuckPod(t *testing.T) {
	for _, grace := range []int64{30, 0} {
		t.Run(fmt.Sprintf("grace=%d", grace), func(t *testing.T) {
			r, p, w := webhookRig(t, grace)
			g := grace
			state := pod(deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) { s.Finalizers, s.DeletionGracePeriodSeconds = 1, &g })
			var outs []string
			for range 3 {
				d := p.Decide(state, Facts{Now: t0})
				if d.Action != ForceDelete || !d.RemoveFinalizers {
					t.Fatalf("decision %+v", d)
				}
				if out, err := r.act.Handle(context.Background(), state, d, Facts{Now: t0}); err == nil || !out.Retry {
					outs = append(outs, fmt.Sprintf("%+v %v", out, err))
				}
			}
			webhookOutcome(t, r, w, "forcedelete")
			if len(outs) > 0 {
				t.Errorf("outcomes %v; want each visit a failure, retried with backoff", outs)
			}
		})
	}
}

// TestActuatorFinalizersPutBackFailedPod: the same webhook on an Evicted pod
// its finalizer left Terminating (grace 0) past terminatingTimeout
// (removeFinalizers true, rows 4 and 9): the PATCH answers with a finalizer,
// so the pod stays; it is reported failed once, never removed.
func TestActuatorFinalizersPutBackFailedPod(t *testing.T) {
	p := testPolicy()
	p.RemoveFinalizers = true
	w := actuate.NewWindow(10, time.Minute)
	r := newRig(t, p, false, w, livePod(liveFailedLeftTerminating))
	webhookPutsFinalizersBack(r)
	state := stateFailedLeftTerminating()
	d := p.Decide(state, Facts{Now: t0})
	if d.Action != ForceDelete || !d.RemoveFinalizers {
		t.Fatalf("decision %+v", d)
	}
	for range 2 {
		r.act.Handle(context.Background(), state, d, Facts{Now: t0})
	}
	webhookOutcome(t, r, w, "forcedelete")
}

// liveFailedLeftTerminating is an Evicted pod whose DELETE (grace 0, a
// terminal pod) its finalizer has kept Terminating for 6 minutes: stuck
// past terminatingTimeout, so removeFinalizers clears it.
func liveFailedLeftTerminating(p *corev1.Pod) {
	ts, zero := metav1.NewTime(t0.Add(-6*time.Minute)), int64(0)
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &ts, &zero
	p.Finalizers = []string{"example.com/keep"}
}

// stateFailedLeftTerminating is the mirror's state of liveFailedLeftTerminating.
func stateFailedLeftTerminating() *events.PodState {
	return pod(failed("Evicted"), deleting(t0.Add(-6*time.Minute)), func(s *events.PodState) {
		zero := int64(0)
		s.DeletionGracePeriodSeconds, s.Finalizers = &zero, 1
	})
}

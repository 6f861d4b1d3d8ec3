package cordon

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	k8stesting "k8s.io/client-go/testing"
)

// podAPI answers pod LISTs as the API server does, which the fakes do not:
// it applies the field selector (spec.nodeName, status.phase), pages by
// limit and continue, and rejects a continue sent together with
// resourceVersion or resourceVersionMatch (the bug that kept nodes with more
// than 500 pods from ever being cordoned). It serves whole pods to the typed
// client and PartialObjectMetadata to the metadata client, and records
// every page asked for.
type podAPI struct {
	pods  func() []corev1.Pod
	pages []podPage
	// expire is how many continue pages, from the first on, are answered
	// 410 Gone (the token expired).
	expire int
}

type podPage struct {
	metadata bool
	opts     metav1.ListOptions
}

func podFields(p *corev1.Pod) fields.Set {
	return fields.Set{"spec.nodeName": p.Spec.NodeName, "status.phase": string(p.Status.Phase)}
}

func (f *podAPI) list(o metav1.ListOptions, metadata bool) ([]corev1.Pod, string, error) {
	f.pages = append(f.pages, podPage{metadata: metadata, opts: o})
	if o.Continue != "" && (o.ResourceVersion != "" || o.ResourceVersionMatch != "") {
		return nil, "", fmt.Errorf("specifying resource version is not allowed when using continue")
	}
	if o.Continue != "" && f.expire > 0 {
		f.expire--
		return nil, "", apierrors.NewResourceExpired("the provided continue parameter is too old")
	}
	sel, err := fields.ParseSelector(o.FieldSelector)
	if err != nil {
		return nil, "", err
	}
	var matched []corev1.Pod
	for _, p := range f.pods() {
		if sel.Matches(podFields(&p)) {
			matched = append(matched, p)
		}
	}
	start, end := 0, len(matched)
	if o.Continue != "" {
		fmt.Sscanf(o.Continue, "at-%d", &start)
	}
	if o.Limit > 0 {
		end = min(start+int(o.Limit), len(matched))
	}
	next := ""
	if end < len(matched) {
		next = fmt.Sprintf("at-%d", end)
	}
	return matched[start:end], next, nil
}

// serveTyped makes client's pod LISTs answer from f.
func (f *podAPI) serveTyped(client *fake.Clientset) {
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		items, next, err := f.list(a.(k8stesting.ListActionImpl).GetListOptions(), false)
		return true, &corev1.PodList{ListMeta: metav1.ListMeta{Continue: next}, Items: items}, err
	})
}

// metadataAPI is the metadata client over a podAPI (the client-go fake
// drops limit, continue and resourceVersion from the options it records).
// Only pod LISTs are served: any other call panics (nil interface).
type metadataAPI struct {
	metadata.ResourceInterface
	f *podAPI
}

func (m metadataAPI) Resource(gvr schema.GroupVersionResource) metadata.Getter {
	if gvr != corev1.SchemeGroupVersion.WithResource("pods") {
		panic("metadataAPI serves pods only, not " + gvr.String())
	}
	return m
}

func (m metadataAPI) Namespace(string) metadata.ResourceInterface { return m }

func (m metadataAPI) List(_ context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	items, next, err := m.f.list(opts, true)
	if err != nil {
		return nil, err
	}
	out := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{Continue: next}}
	for _, p := range items {
		out.Items = append(out.Items, metav1.PartialObjectMetadata{ObjectMeta: p.ObjectMeta})
	}
	return out, nil
}

// apiMetadata is a metadata client over the typed fake's pods, answering as
// the API server does (podAPI); the typed fake itself is left as it is.
func apiMetadata(client *fake.Clientset) (metadata.Interface, *podAPI) {
	f := &podAPI{pods: func() []corev1.Pod {
		l, err := client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "")
		if err != nil {
			panic(err)
		}
		return l.(*corev1.PodList).Items
	}}
	return metadataAPI{f: f}, f
}

// crowdedNode is 1,234 pods on node "crowded" (1,221 counting: every 100th
// Succeeded; 111 of those being evicted through the Eviction API, and 124
// preempted, which is no eviction), plus pods of another node.
func crowdedNode() (items []corev1.Pod, want podCount) {
	for i := range 1234 {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("p%d", i)},
			Spec: corev1.PodSpec{NodeName: "crowded"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		switch {
		case i%100 == 0:
			p.Status.Phase = corev1.PodSucceeded // not counted
		case i%10 == 0:
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}
		case i%10 == 1:
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"}}
		}
		if p.Status.Phase == corev1.PodRunning {
			want.Pods++
			if i%10 == 0 {
				want.Evicting++
			}
		}
		items = append(items, p)
	}
	for i := range 50 {
		items = append(items, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("elsewhere-%d", i)},
			Spec: corev1.PodSpec{NodeName: "other"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	}
	return items, want
}

// TestRecount: the recount of a node with more pods than one page, by
// either read. Whole pods are read only when the evicting pods are asked
// for (or there is no metadata client); otherwise the pods' metadata, and
// both count the same pods.
func TestRecount(t *testing.T) {
	items, all := crowdedNode()
	if all.Pods != 1221 || all.Evicting != 111 {
		t.Fatalf("fixture: %+v", all)
	}
	tests := []struct {
		name         string
		metadata     bool // the recounter has a metadata client
		evicting     bool
		wantMetadata bool
		want         podCount
	}{
		{"no metadata client: whole pods", false, false, false, all},
		{"number only: metadata", true, false, true, podCount{Pods: all.Pods}},
		{"evicting asked for: whole pods", true, true, false, all},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			api := &podAPI{pods: func() []corev1.Pod { return items }}
			api.serveTyped(client)
			r := recounter{client: client}
			if tc.metadata {
				r.meta = metadataAPI{f: api}
			}
			got, err := r.count(context.Background(), "crowded", "777", tc.evicting)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("recount = %+v, want %+v", got, tc.want)
			}
			if len(api.pages) != 3 {
				t.Fatalf("%d pages, want 3", len(api.pages))
			}
			for i, p := range api.pages {
				if p.metadata != tc.wantMetadata {
					t.Fatalf("page %d read metadata %v, want %v", i, p.metadata, tc.wantMetadata)
				}
				if p.opts.FieldSelector != recountSelector("crowded") || p.opts.Limit != recountPageSize {
					t.Fatalf("page %d options %+v", i, p.opts)
				}
			}
			if first := api.pages[0].opts; first.ResourceVersion != "777" || first.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan {
				t.Fatalf("first page options %+v", first)
			}
		})
	}
}

// TestRecountRestartsOnExpiredContinue: a continue token that expired (410)
// restarts the count once from a new first page, by either read; a second
// 410 is the count's error, never a partial count.
func TestRecountRestartsOnExpiredContinue(t *testing.T) {
	items, all := crowdedNode()
	for _, tc := range []struct {
		name      string
		metadata  bool
		expire    int
		want      podCount
		wantPages int // first, continue (410), first, continue, continue
		wantErr   bool
	}{
		{"whole pods, one expiry", false, 1, all, 5, false},
		{"metadata, one expiry", true, 1, podCount{Pods: all.Pods}, 5, false},
		{"whole pods, two expiries", false, 2, podCount{}, 4, true},
		{"metadata, two expiries", true, 2, podCount{}, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			api := &podAPI{pods: func() []corev1.Pod { return items }, expire: tc.expire}
			api.serveTyped(client)
			r := recounter{client: client}
			if tc.metadata {
				r.meta = metadataAPI{f: api}
			}
			got, err := r.count(context.Background(), "crowded", "777", false)
			if tc.wantErr != apierrors.IsResourceExpired(err) || got != tc.want || (err != nil && !tc.wantErr) {
				t.Fatalf("recount = %+v, %v; want %+v (error %v)", got, err, tc.want, tc.wantErr)
			}
			firsts := 0
			for _, p := range api.pages {
				if p.opts.Continue == "" {
					firsts++
				}
			}
			if len(api.pages) != tc.wantPages || firsts != 2 {
				t.Fatalf("%d pages, %d of them first pages; want %d and 2", len(api.pages), firsts, tc.wantPages)
			}
		})
	}
}

func TestRecountSelector(t *testing.T) {
	sel, err := fields.ParseSelector(recountSelector("n1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		node  string
		phase corev1.PodPhase
		want  bool
	}{
		{"n1", corev1.PodRunning, true}, {"n1", corev1.PodPending, true}, {"n1", corev1.PodUnknown, true},
		{"n1", corev1.PodSucceeded, false}, {"n1", corev1.PodFailed, false}, {"n2", corev1.PodRunning, false},
	} {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: tc.node}, Status: corev1.PodStatus{Phase: tc.phase}}
		if got := sel.Matches(podFields(p)); got != tc.want {
			t.Errorf("%s/%s: selected %v, want %v", tc.node, tc.phase, got, tc.want)
		}
	}
}

// TestActuatorRecountReadsWhatTheDecisionNeeds: the actuator reads whole
// pods only where the decision can depend on the pods being evicted (a node
// opswire holds, with the drain rule on); every other recount, a new cordon
// first of all, reads the pods' metadata.
func TestActuatorRecountReadsWhatTheDecisionNeeds(t *testing.T) {
	evicting := func(objs []runtime.Object, n int) []runtime.Object {
		for _, o := range objs[:n] {
			p := o.(*corev1.Pod)
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}
		}
		return objs
	}
	noDrain := withPolicy("cordon", func(p *Policy) { p.DrainEvictingPercent = 0 })
	tests := []struct {
		name string
		pol  Policy
		// live is the node in the API; mirror the node the mirror showed.
		live, mirror *corev1.Node
		pods         []runtime.Object
		mirrorMarked bool
		// The pages read, in order: true a metadata page, false whole pods.
		wantPages []bool
		wantVerb  string // "" nothing written
	}{
		{name: "new cordon: metadata", pol: seedPolicy("cordon"), live: apiNode("a"), mirror: apiNode("a"),
			pods: pods("a", 101), wantPages: []bool{true}, wantVerb: VerbCordoned},
		{name: "uncordon with the drain rule on: whole pods", pol: seedPolicy("cordon"), live: apiNode("a", ours(EffectCordon)),
			mirror: apiNode("a", ours(EffectCordon)), mirrorMarked: true, pods: pods("a", 89), wantPages: []bool{false}, wantVerb: VerbUncordoned},
		{name: "drain being handed over: whole pods", pol: seedPolicy("cordon"), live: apiNode("a", ours(EffectCordon)),
			mirror: apiNode("a", ours(EffectCordon)), mirrorMarked: true, pods: evicting(pods("a", 89), 60), wantPages: []bool{false}, wantVerb: VerbHandedOver},
		// No release while an eviction is in flight, drain rule or not.
		{name: "uncordon with the drain rule off: whole pods", pol: noDrain, live: apiNode("a", ours(EffectCordon)),
			mirror: apiNode("a", ours(EffectCordon)), mirrorMarked: true, pods: pods("a", 89), wantPages: []bool{false}, wantVerb: VerbUncordoned},
		{name: "uncordon, an eviction in flight live: nothing written", pol: noDrain, live: apiNode("a", ours(EffectCordon)),
			mirror: apiNode("a", ours(EffectCordon)), mirrorMarked: true, pods: evicting(pods("a", 89), 1), wantPages: []bool{false}},
		// The mirror showed no mark; the API shows another leader's mark
		// (written in cordon mode), and a drain under way. Counted by number
		// only, the taint-mode policy would re-apply its taint over the
		// drain; the evictions, counted again, make it a handover, which
		// no cordon agrees to: nothing is written.
		{name: "mark found live: counted again, whole pods", pol: seedPolicy("taint"), live: apiNode("a", ours(EffectCordon)),
			mirror: apiNode("a"), pods: evicting(pods("a", 101), 60), wantPages: []bool{true, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.pol, false, Fleet{Managed: 10}, append([]runtime.Object{tc.live}, tc.pods...)...)
			meta, api := apiMetadata(h.client)
			api.serveTyped(h.client)
			h.act.recount.meta = meta
			state := mirrorOf(tc.mirror, len(tc.pods)-1)
			d := Evaluate(tc.pol, state, tc.mirrorMarked)
			if _, err := h.act.Apply(context.Background(), state, tc.mirrorMarked, d); err != nil {
				t.Fatal(err)
			}
			var got []bool
			for _, p := range api.pages {
				got = append(got, p.metadata)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantPages) {
				t.Fatalf("pages read (true: metadata) %v, want %v", got, tc.wantPages)
			}
			var verbs []string
			for _, m := range decisions(t, h.pub) {
				verbs = append(verbs, m.D.Verb)
			}
			switch {
			case tc.wantVerb == "" && len(h.writes()) != 0:
				t.Fatalf("wrote %v (published %v), want nothing", h.writes(), verbs)
			case tc.wantVerb != "" && (len(verbs) != 1 || verbs[0] != tc.wantVerb):
				t.Fatalf("published %v, want %s", verbs, tc.wantVerb)
			}
		})
	}
}

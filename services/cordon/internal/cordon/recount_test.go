package cordon

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestRecountPages: the recount of a node with more pods than one page. The
// fake API behaves as the real one: it rejects a continue token sent together
// with resourceVersion or resourceVersionMatch (the bug that kept nodes with
// more than 500 pods from ever being cordoned).
func TestRecountPages(t *testing.T) {
	const total = 1234
	var items []corev1.Pod
	var want podCount
	for i := range total {
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
	client := fake.NewClientset()
	var calls []metav1.ListOptions
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		o := a.(k8stesting.ListActionImpl).GetListOptions()
		calls = append(calls, o)
		if o.Continue != "" && (o.ResourceVersion != "" || o.ResourceVersionMatch != "") {
			return true, nil, fmt.Errorf("specifying resource version is not allowed when using continue")
		}
		start := 0
		if o.Continue != "" {
			fmt.Sscanf(o.Continue, "at-%d", &start)
		}
		end := min(start+int(o.Limit), total)
		list := &corev1.PodList{Items: items[start:end]}
		if end < total {
			list.Continue = fmt.Sprintf("at-%d", end)
		}
		return true, list, nil
	})
	got, err := recountPods(context.Background(), client, 0, "crowded", "777")
	if err != nil {
		t.Fatal(err)
	}
	if got != want || want.Pods != 1221 {
		t.Fatalf("recount = %+v, want %+v", got, want)
	}
	if len(calls) != 3 {
		t.Fatalf("%d pages, want 3", len(calls))
	}
	if first := calls[0]; first.ResourceVersion != "777" || first.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan ||
		first.Limit != recountPageSize || first.FieldSelector != "spec.nodeName=crowded" {
		t.Fatalf("first page options %+v", first)
	}
	if next := calls[1]; next.FieldSelector != "spec.nodeName=crowded" || next.Limit != recountPageSize {
		t.Fatalf("next page options %+v", next)
	}
}

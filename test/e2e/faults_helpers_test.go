package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// kubeDivergence compares KUBE with the API for cluster e2e and returns the
// first difference ("" when KUBE holds the API's state): every pod with its
// uid, phase, reason and deletion mark; every node with the API's pod count;
// every subject of an object the API no longer has ends in a tombstone.
func kubeDivergence(t *testing.T, cp *harness.ControlPlane, js jetstream.JetStream) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pods, err := cp.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return "API: " + err.Error()
	}
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "API: " + err.Error()
	}
	st, err := js.Stream(ctx, "KUBE")
	if err != nil {
		return "KUBE: " + err.Error()
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter("kube.e2e.>"))
	if err != nil {
		return "KUBE: " + err.Error()
	}
	live := map[string]bool{}
	counts := map[string]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		subj := subject.Pod("e2e", p.Namespace, p.Name)
		live[subj] = true
		if p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			counts[p.Spec.NodeName]++
		}
		s := lastPod(t, js, subj)
		switch {
		case s == nil:
			return subj + ": not in KUBE"
		case s.Op == events.OpDelete || s.UID != string(p.UID):
			return fmt.Sprintf("%s: KUBE has op %s uid %s, the API uid %s", subj, s.Op, s.UID, p.UID)
		case s.Phase != string(p.Status.Phase) || s.Reason != p.Status.Reason:
			return fmt.Sprintf("%s: KUBE has %s/%s, the API %s/%s", subj, s.Phase, s.Reason, p.Status.Phase, p.Status.Reason)
		case (s.DeletionTimestamp == nil) != (p.DeletionTimestamp == nil):
			return subj + ": deletion mark differs"
		}
	}
	for _, n := range nodes.Items {
		subj := subject.Node("e2e", n.Name)
		live[subj] = true
		s := lastNode(t, js, subj)
		switch {
		case s == nil || s.Op == events.OpDelete || s.UID != string(n.UID):
			return subj + ": node missing or another uid in KUBE"
		case s.Pods != counts[n.Name]:
			return fmt.Sprintf("%s: KUBE counts %d pods, the API %d", subj, s.Pods, counts[n.Name])
		}
	}
	for subj := range info.State.Subjects {
		if live[subj] {
			continue
		}
		var s struct {
			Op events.Op `json:"op"`
		}
		if lastState(t, js, subj, &s) && s.Op != events.OpDelete {
			return subj + ": gone from the API, no tombstone in KUBE"
		}
	}
	return ""
}

// waitConverged polls until KUBE holds the API's state and returns how long
// that took from since.
func waitConverged(t *testing.T, cp *harness.ControlPlane, js jetstream.JetStream, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	var why string
	deadline := time.Now().Add(timeout)
	for {
		if why = kubeDivergence(t, cp, js); why == "" {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			t.Fatalf("KUBE did not converge to the API's state in %v: %s", timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deletesOf counts the DELETE requests for one pod that reached the proxy.
func deletesOf(px *harness.APIProxy, ns, name string) int {
	path := "/api/v1/namespaces/" + ns + "/pods/" + name
	return px.Count(func(r harness.APIRequest) bool { return r.Method == http.MethodDelete && r.Path == path })
}

// doneDeletesOf counts the DELETE requests for one pod that the API answered
// with success: two would be one pod deleted twice. (A request whose client
// died on the way, which the proxy answers 502, is not one.)
func doneDeletesOf(px *harness.APIProxy, ns, name string) int {
	path := "/api/v1/namespaces/" + ns + "/pods/" + name
	return px.Count(func(r harness.APIRequest) bool {
		return r.Method == http.MethodDelete && r.Path == path && r.Status >= 200 && r.Status < 300
	})
}

// listsOf counts the full-state requests (LIST, or streaming list) for a
// resource ("pods", "nodes") that reached the proxy.
func listsOf(px *harness.APIProxy, resource string) int {
	return px.Count(func(r harness.APIRequest) bool {
		return r.IsList() && strings.HasSuffix(r.Path, "/"+resource)
	})
}

// deletePodNow deletes a pod with no grace period and waits until it is gone.
func deletePodNow(t *testing.T, cp *harness.ControlPlane, ns, name string) {
	t.Helper()
	if err := cp.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatalf("delete %s/%s: %v", ns, name, err)
	}
	harness.WaitPodGone(t, cp.Client, ns, name, 10*time.Second)
}

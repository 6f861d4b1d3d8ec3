package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// lastPod returns the state KUBE holds for a pod subject, or nil.
func lastPod(t *testing.T, js jetstream.JetStream, subj string) *events.PodState {
	t.Helper()
	var s events.PodState
	if !lastState(t, js, subj, &s) {
		return nil
	}
	return &s
}

// lastNode returns the state KUBE holds for a node subject, or nil.
func lastNode(t *testing.T, js jetstream.JetStream, subj string) *events.NodeState {
	t.Helper()
	var s events.NodeState
	if !lastState(t, js, subj, &s) {
		return nil
	}
	return &s
}

func lastState(t *testing.T, js jetstream.JetStream, subj string, out any) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KUBE")
	if err != nil {
		return false
	}
	m, err := st.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return false
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		t.Fatalf("%s: %v", subj, err)
	}
	return true
}

// kubeLastSeq is the sequence of the newest message stored in KUBE: the
// difference between two readings is the number of messages stored between them.
func kubeLastSeq(t *testing.T, n *harness.NATS) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.JS.Stream(ctx, "KUBE")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// startWatcher runs opswire-watcher against the harness and waits until ready.
func startWatcher(t *testing.T, cp *harness.ControlPlane, n *harness.NATS, cfg, id string) *harness.Process {
	t.Helper()
	p := harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: id})
	p.WaitReady(t, 60*time.Second)
	waitMirrored(t, cp, n)
	return p
}

// waitMirrored waits until KUBE holds a message for every node and pod the
// API has now. A watcher is ready once its caches are synced (a standby is
// ready too), which can be before it has published them: a service started
// right after would load a partial cluster and, for instance, compute the
// cordon cap on too few nodes.
func waitMirrored(t *testing.T, cp *harness.ControlPlane, n *harness.NATS) {
	t.Helper()
	ctx := context.Background()
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string // subject suffixes, independent of the cluster name
	for _, node := range nodes.Items {
		want = append(want, ".node."+subject.Encode(node.Name))
	}
	for _, pod := range pods.Items {
		want = append(want, ".pod."+subject.Encode(pod.Namespace)+"."+subject.Encode(pod.Name))
	}
	harness.Eventually(t, 30*time.Second, "KUBE to hold every node and pod", func() bool {
		st, err := n.JS.Stream(ctx, "KUBE")
		if err != nil {
			return false
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter("kube.>"))
		if err != nil {
			return false
		}
		stored := slices.Collect(maps.Keys(info.State.Subjects))
		for _, suffix := range want {
			if !slices.ContainsFunc(stored, func(s string) bool { return strings.HasSuffix(s, suffix) }) {
				return false
			}
		}
		return true
	})
}

// getLast reads the raw last message of a KUBE subject.
func getLast(n *harness.NATS, subj string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.JS.Stream(ctx, "KUBE")
	if err != nil {
		return nil, err
	}
	return st.GetLastMsgForSubject(ctx, subj)
}

// httpStatus returns the status code of a GET, or 0 on a transport error.
func httpStatus(url string) int {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

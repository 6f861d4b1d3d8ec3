package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// scenario creates nodes and pods and makes each situation happen, waiting
// for opswire's answer (the OPS event and the Feishu card) before the next.
type scenario struct {
	d    *demo
	cp   *harness.ControlPlane
	nc   *nats.Conn
	pace time.Duration
}

// next starts a new situation after the reading pause.
func (s *scenario) next(format string, args ...any) {
	time.Sleep(s.pace) // pacing for the reader, not synchronisation
	s.d.say("")
	s.d.say(format, args...)
}

func (s *scenario) run() {
	d, c, env := s.d, s.cp.Client, s.d.env
	ctx := context.Background()
	wait := 45 * time.Second

	d.say("")
	d.say("Scenario: 4 nodes (node-a … node-d) and a namespace \"shop\". There is no kubelet: the demo writes pod and node status itself.")
	harness.CreateNamespace(env, c, "shop")
	for _, name := range []string{"node-a", "node-b", "node-c", "node-d"} {
		harness.CreateNode(env, c, harness.Node(name, nil))
	}

	s.next("① node-a fills up: 6 pods land on it (autoCordon.maxPods: 6).")
	for i := 1; i <= 6; i++ {
		harness.CreatePod(env, c, harness.Pod("shop", fmt.Sprintf("web-%d", i), "node-a"))
		time.Sleep(s.pace / 20) // pacing for the reader, not synchronisation
	}
	d.waitFor(wait, "node-a cordoned", "cordon:cordoned:node-a")

	s.next("② node-a drains: 3 pods finish (autoCordon.minPods: 3), so opswire lifts its own cordon.")
	zero := int64(0)
	for i := 1; i <= 3; i++ {
		if err := c.CoreV1().Pods("shop").Delete(ctx, fmt.Sprintf("web-%d", i), metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			env.Fatalf("delete pod: %v", err)
		}
	}
	d.waitFor(wait, "node-a uncordoned", "cordon:uncordoned:node-a")

	s.next("③ node-b runs low on memory: the kubelet evicts 3 pods, which stay behind as Failed/Evicted.")
	for i := 1; i <= 3; i++ {
		p := harness.CreatePod(env, c, harness.Pod("shop", fmt.Sprintf("evicted-%d", i), "node-b"))
		harness.SetPodStatus(env, c, p, func(st *corev1.PodStatus) {
			st.Phase, st.Reason, st.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		})
	}
	for i := 1; i <= 3; i++ {
		d.waitFor(wait, "evicted pod deleted", fmt.Sprintf("cleanup:deleted:shop/evicted-%d", i))
	}

	s.next("④ a pod on node-c is deleted but its node never confirms: it is stuck Terminating (delException.terminatingTimeout: 3s).")
	harness.CreatePod(env, c, harness.Pod("shop", "stuck-1", "node-c"))
	two := int64(2)
	if err := c.CoreV1().Pods("shop").Delete(ctx, "stuck-1", metav1.DeleteOptions{GracePeriodSeconds: &two}); err != nil {
		env.Fatalf("delete pod: %v", err)
	}
	d.waitFor(wait, "stuck pod force-deleted", "cleanup:forcedeleted:shop/stuck-1")

	s.next("⑤ two pods keep crashing (12 and 7 restarts; sendReport.total: 5). An operator asks for the restart report now:")
	for _, p := range []struct {
		name, reason string
		restarts     int32
	}{{"api-1", "OOMKilled", 12}, {"api-2", "Error", 7}} {
		pod := harness.CreatePod(env, c, harness.Pod("shop", p.name, "node-b"))
		harness.SetPodStatus(env, c, pod, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodRunning
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.invalid/app:1", Ready: true,
				RestartCount: p.restarts, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: p.reason, ExitCode: 137, FinishedAt: metav1.Now()}}}}
		})
	}
	for _, name := range []string{"api-1", "api-2"} {
		s.waitMirrored(name) // so the report sees both crash loops
	}
	s.requestReport()
	d.waitFor(wait, "restart report", "report:restarts")

	s.next("⑥ node-d pulls big images: 30 images of 400 MiB, 11.7 GiB in all (imageAlert.maxBytes: 10 GiB).")
	harness.SetNodeStatus(env, c, "node-d", func(st *corev1.NodeStatus) {
		st.Images = make([]corev1.ContainerImage, 30)
		for i := range st.Images {
			st.Images[i] = corev1.ContainerImage{Names: []string{fmt.Sprintf("registry.invalid/big-%d:1", i)}, SizeBytes: 400 << 20}
		}
	})
	d.waitFor(wait, "image alert", "report:images:node-d")

	d.say("")
	d.say("Waiting for the last Feishu cards (the notifier groups events for notifier.groupWait: 1s)…")
	for _, k := range []string{"node-a", "evicted-", "stuck-1", "api-1", "node-d"} {
		d.waitFor(wait, "a card naming "+k, "card:"+k)
	}
}

// waitMirrored waits until the watcher has published the pod's restarts to
// KUBE (what the report leader reads).
func (s *scenario) waitMirrored(pod string) {
	js, err := jetstream.New(s.nc)
	if err != nil {
		s.d.env.Fatalf("jetstream: %v", err)
	}
	subj := subject.Pod(Cluster, "shop", pod)
	harness.Eventually(s.d.env, 30*time.Second, pod+" in KUBE", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, subject.KubeStream)
		if err != nil {
			return false
		}
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			return false
		}
		var ps events.PodState
		return json.Unmarshal(m.Data, &ps) == nil && ps.Restarts() > 0
	})
}

// requestReport asks the report leader for a report now, over core NATS
// request/reply (what `nats req ctl.demo.report.run ”` does). No leader yet
// means "no responders": retry.
func (s *scenario) requestReport() {
	subj := "ctl." + Cluster + ".report.run"
	harness.Eventually(s.d.env, 30*time.Second, "an answer on "+subj, func() bool {
		msg, err := s.nc.Request(subj, nil, 5*time.Second)
		if err != nil {
			return false
		}
		s.d.say("  $ nats req %s ''  →  %s", subj, string(msg.Data))
		return true
	})
}

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// TestNotifierRealActors drives the real watcher, cleanup and report
// binaries against a real API server, with the seed's configuration style:
// sendReport.apiurl / delException.apiurl (and msgtitle) and no notifier
// section at all. Cleanup results must reach the cleanup bot and the restart
// report the report bot, each as a valid card with the seed's title.
func TestNotifierRealActors(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	bots := feishutest.NewServer()
	t.Cleanup(bots.Close)
	cleanupBot := bots.AddBot("cleanup-bot-token-3e9", feishutest.Bot{})
	reportBot := bots.AddBot("report-bot-token-a41", feishutest.Bot{})
	worker := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, cp.Client, "apps")

	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: e2e
controller:
  LeaderElect: false
sendReport:
  total: 3
  schedule: "0 0 10 * * 1"
  msgtitle: "pod重启次数过多"
  apiurl: "%s"
delException:
  interval: 1s
  minAge: 0s
  msgtitle: "删除异常状态 Pod"
  apiurl: "%s"
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
`, reportBot, cleanupBot))
	startWatcher(t, cp, n, cfg, "w1")
	for _, svc := range []string{"cleanup", "report", "notifier"} {
		o := harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: svc + "-a"}
		if svc != "notifier" {
			o.Kubeconfig = cp.Kubeconfig
		}
		harness.StartService(t, svc, o).WaitReady(t, 60*time.Second)
	}

	// A restarting pod for the report, an evicted one for cleanup.
	crashy := harness.CreatePod(t, cp.Client, harness.Pod("apps", "crashy", worker.Name))
	harness.SetPodStatus(t, cp.Client, crashy, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "app:1", RestartCount: 7,
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	})
	evict(t, cp, harness.CreatePod(t, cp.Client, harness.Pod("apps", "evicted-1", worker.Name)))

	harness.Eventually(t, 30*time.Second, "cleanup card on the cleanup bot", func() bool {
		for _, c := range bots.Cards("cleanup-bot-token-3e9") {
			if strings.Contains(c.Text(), "apps/evicted-1") {
				return true
			}
		}
		return false
	})
	harness.Eventually(t, 30*time.Second, "an on-demand report with the restarting pod", func() bool {
		m, err := n.Conn.Request("ctl.e2e.report.run", nil, 10*time.Second)
		if err != nil {
			return false
		}
		var r struct {
			Offenders int `json:"offenders"`
		}
		return json.Unmarshal(m.Data, &r) == nil && r.Offenders >= 1
	})
	harness.Eventually(t, 30*time.Second, "report card on the report bot", func() bool {
		for _, c := range bots.Cards("report-bot-token-a41") {
			if strings.Contains(c.Text(), "crashy") {
				return true
			}
		}
		return false
	})
	for _, c := range bots.Cards("cleanup-bot-token-3e9") {
		if c.Title() != "删除异常状态 Pod" || strings.Contains(c.Text(), "crashy") {
			t.Errorf("cleanup bot got a wrong card:\n%s", c.Text())
		}
	}
	for _, c := range bots.Cards("report-bot-token-a41") {
		if c.Title() != "pod重启次数过多" || strings.Contains(c.Text(), "evicted-1") {
			t.Errorf("report bot got a wrong card:\n%s", c.Text())
		}
		t.Logf("report card:\n%s", c.Text())
	}
	if v := bots.RateViolations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
}

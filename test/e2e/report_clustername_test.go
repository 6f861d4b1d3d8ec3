package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/test/harness"
)

// TestReportUnderClusterNamesKVKeysRefuse: cluster.name accepts any NATS
// subject token, such as "eu:prod" or a Chinese name, but a NATS KV key
// allows neither ':' nor Chinese. For each such name, with the real watcher,
// report and notifier, leader-elected, the report leader gets ready (its KV
// state loads), stores its scheduled and requested reports on
// ops.<name>.report.restarts under ids naming the cluster as configured, and
// the notifier (holding its KV lease) delivers them to the cluster's Feishu
// bot. The keys are the documented ClusterKey forms. Each cluster has its own
// NATS: two watchers of one API server would publish the same objects under
// the same ids, which real clusters never do.
func TestReportUnderClusterNamesKVKeysRefuse(t *testing.T) {
	cp := harness.StartControlPlane(t)
	kubeconfig := reportKubeconfig(t, cp, "default")
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	restartingPod(t, cp, "default", "crashy", node.Name, 150)
	restartingPod(t, cp, "default", "calm", node.Name, 5)
	bots := feishutest.NewServer()
	t.Cleanup(bots.Close)

	tests := []struct {
		name  string // cluster.name
		lease string // controller.leaseLockName: the clusters share the API server
		key   string // the name in KV keys (docs/report.md)
	}{
		{name: "eu:prod", lease: "eu-prod", key: "eu=3Aprod"},
		{name: "北京生产", lease: "beijing", key: "=E5=8C=97=E4=BA=AC=E7=94=9F=E4=BA=A7"},
		{name: "arn:aws:eks:eu-west-1:123456789012:cluster/prod", lease: "eks-arn", key: "arn=3Aaws=3Aeks=3Aeu-west-1=3A123456789012=3Acluster/prod"},
	}
	for _, tc := range tests {
		t.Run(tc.lease, func(t *testing.T) {
			n := harness.StartNATS(t)
			bot := tc.lease + "-bot-token-1c2"
			cfg := harness.WriteConfig(t, fmt.Sprintf(`
cluster:
  name: %q
controller:
  LeaderElect: true
  leaseLockName: %s
  leaseLockNamespace: default
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
sendReport:
  total: 100
  schedule: "*/3 * * * * *"
  msgtitle: "pods restarting too often"
  apiurl: %q
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
`, tc.name, tc.lease, bots.AddBot(bot, feishutest.Bot{})))
			startWatcher(t, cp, n, cfg, "w-"+tc.lease)
			waitRestarts(t, n, tc.name, "default", "crashy", 150)
			ops := harness.CollectOps(t, n, "ops."+tc.name+".report.restarts")
			r := startReport(t, n, cfg, kubeconfig, "r-"+tc.lease)
			harness.WaitLeader(t, cp.Client, "default", tc.lease+"-report", map[string]*harness.Process{"r-" + tc.lease: r})
			harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: n.URL, ID: "n-" + tc.lease}).
				WaitReady(t, 60*time.Second)

			id := requestReport(t, n, tc.name)
			checkOnlyCrashy(t, restartReport(t, ops.WaitFor(t, 10*time.Second, "the requested report", func(m harness.Msg) bool { return m.ID == id })), 150)
			harness.Eventually(t, 15*time.Second, "two scheduled reports", func() bool { return len(scheduledReports(t, ops)) >= 2 })
			for _, m := range ops.All() {
				if m.Subject != "ops."+tc.name+".report.restarts" {
					t.Errorf("report %s on %s", m.ID, m.Subject)
				}
			}
			for _, r := range scheduledReports(t, ops) {
				if want := "report/" + tc.name + "/restarts/" + r.Tick.UTC().Format(time.RFC3339); r.ID != want {
					t.Errorf("scheduled report id %s, want %s", r.ID, want)
				}
				checkOnlyCrashy(t, r, 150)
			}
			harness.Eventually(t, 30*time.Second, "a report card naming the cluster on its bot", func() bool {
				for _, card := range bots.Cards(bot) {
					if strings.Contains(card.Text(), "crashy") && strings.Contains(card.Text(), tc.name) {
						return true
					}
				}
				return false
			})

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for bucket, key := range map[string]string{"opswire_report": tc.key + ".tick.last", "opswire-notifier-lease": tc.key} {
				kv, err := n.JS.KeyValue(ctx, bucket)
				if err != nil {
					t.Fatalf("KV bucket %s: %v", bucket, err)
				}
				if _, err := kv.Get(ctx, key); err != nil {
					t.Errorf("KV %s key %s: %v", bucket, key, err)
				}
			}
		})
	}
}

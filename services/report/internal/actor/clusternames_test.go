package actor

import (
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/testkit"
)

// TestReportsUnderAnyClusterName: cluster.name accepts any NATS subject
// token, and KV keys allow far fewer characters. For each such name the
// leader must get ready (its KV state loads), answer requests on
// ctl.<name>.report.run, read kube.<name>.>, and store its reports and alerts
// on subjects that carry the name exactly as configured (the audit
// contract), with the name in their ids and ce-source.
func TestReportsUnderAnyClusterName(t *testing.T) {
	for _, name := range []string{"eu:prod", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", "北京生产"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			e.cluster = name
			e.pod("shop", "crashy", 150)
			e.node("node.a", 500)
			ops := e.collect("ops.>")
			cfg := testConfig(t, "sendReport:\n  total: 100\n  schedule: \"@every 1s\"\n  mode: increase\n"+
				"imageAlert:\n  maxBytes: 1000\n  maxPercent: 0\n")
			cfg.Cluster.Name = name
			e.lead(cfg)

			reply := e.request()
			if reply.Error != "" || reply.Rows != 1 {
				t.Fatalf("reply on ctl.%s.report.run: %+v", name, reply)
			}
			e.node("node.a", 1200)
			testkit.Eventually(t, 10*time.Second, "the requested report, two scheduled ones and the image alert", func() bool {
				return len(ops.reports(t)) >= 3 && len(ops.alerts(t)) == 1
			})
			ops.mu.Lock()
			for _, m := range ops.msgs {
				want := "ops." + name + ".report.restarts"
				if m.Headers().Get(envelope.HeaderType) == events.TypeImageAlert {
					want = "ops." + name + ".report.images.node_a"
				}
				if m.Subject() != want {
					t.Errorf("stored on %q, want %q", m.Subject(), want)
				}
				if src := m.Headers().Get(envelope.HeaderSource); src != "opswire/"+name+"/report" {
					t.Errorf("ce-source %q, want opswire/%s/report", src, name)
				}
			}
			ops.mu.Unlock()
			for _, r := range scheduledOnly(ops.reports(t)) {
				if !strings.HasPrefix(r.ID, "report/"+name+"/restarts/") {
					t.Errorf("scheduled report id %s does not name the cluster %s", r.ID, name)
				}
			}
			st := kvStore(t, e)
			if _, ok, err := st.LastTick(e.ctx); !ok || err != nil {
				t.Errorf("last tick in KV: %v %v", ok, err)
			}
			if b, err := st.LoadBaseline(e.ctx); b == nil || err != nil {
				t.Errorf("baseline in KV: %v %v", b, err)
			}
		})
	}
}

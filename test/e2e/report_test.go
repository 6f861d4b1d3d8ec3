package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// checkOnlyCrashy asserts a report lists exactly default/crashy with its
// restarts, container, last reason and exit code.
func checkOnlyCrashy(t *testing.T, r events.RestartReport, restarts int64) {
	t.Helper()
	if len(r.Rows) != 1 || r.Offenders != 1 || r.PodsSeen != 2 {
		t.Fatalf("report %s: rows %+v offenders %d podsSeen %d, want only default/crashy of 2 pods", r.ID, r.Rows, r.Offenders, r.PodsSeen)
	}
	row := r.Rows[0]
	if row.Namespace != "default" || row.Pod != "crashy" || row.Node != "worker-1" || row.Restarts != restarts ||
		len(row.Containers) != 1 || row.Containers[0].Name != "app" || row.Containers[0].LastReason != "OOMKilled" ||
		row.Containers[0].LastExitCode != 137 {
		t.Fatalf("report %s row %+v, want default/crashy on worker-1, app %d restarts, OOMKilled 137", r.ID, row, restarts)
	}
}

// TestReportScheduledAcrossReplicas: pods with 150 and 5 restarts and a
// threshold of 100; a schedule of every 3 s; two replicas, then the leader is
// killed. Every tick's report lists exactly the first pod, and no tick is
// stored twice.
func TestReportScheduledAcrossReplicas(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	kubeconfig := reportKubeconfig(t, cp, "default")
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	restartingPod(t, cp, "default", "crashy", node.Name, 150)
	restartingPod(t, cp, "default", "calm", node.Name, 5)
	cfg := harness.WriteConfig(t, reportConfig(`
sendReport:
  total: 100
  schedule: "*/3 * * * * *"
  msgtitle: "pods restarting too often"
imageAlert:
  enable: false
`))
	startWatcher(t, cp, n, cfg, "w1")
	waitRestarts(t, n, "e2e", "default", "crashy", 150)
	waitRestarts(t, n, "e2e", "default", "calm", 5)
	ops := harness.CollectOps(t, n, subject.Ops("e2e", "report", "restarts"))

	procs := map[string]*harness.Process{
		"r1": startReport(t, n, cfg, kubeconfig, "r1"),
		"r2": startReport(t, n, cfg, kubeconfig, "r2"),
	}
	leaderID, leader := harness.WaitLeader(t, cp.Client, "default", "opswire-report", procs)
	harness.Eventually(t, 30*time.Second, "three scheduled reports", func() bool { return len(scheduledReports(t, ops)) >= 3 })
	for id, p := range procs {
		if id == leaderID {
			continue
		}
		if v := p.Metric(`opswire_report_reports_total{outcome="sent",trigger="schedule"}`); v > 0 {
			t.Fatalf("standby %s sent %v scheduled reports", id, v)
		}
	}

	t.Run("on-demand request answers with the id of a report in OPS", func(t *testing.T) {
		id := requestReport(t, n, "e2e")
		m := ops.WaitFor(t, 10*time.Second, "the requested report", func(m harness.Msg) bool { return m.ID == id })
		r := restartReport(t, m)
		if !r.OnDemand || r.ID != id {
			t.Fatalf("requested report %+v", r)
		}
		checkOnlyCrashy(t, r, 150)
	})

	t.Run("leader killed: the other replica continues, no tick twice", func(t *testing.T) {
		before := len(scheduledReports(t, ops))
		leader.Kill()
		delete(procs, leaderID)
		newID, _ := harness.WaitLeader(t, cp.Client, "default", "opswire-report", procs)
		if newID == leaderID {
			t.Fatalf("lease still held by the killed replica")
		}
		harness.Eventually(t, 30*time.Second, "three more scheduled reports", func() bool {
			return len(scheduledReports(t, ops)) >= before+3
		})
	})

	perID := map[string]int{}
	for _, m := range ops.All() {
		perID[m.ID]++
	}
	for _, r := range scheduledReports(t, ops) {
		if perID[r.ID] != 1 {
			t.Fatalf("report %s stored %d times", r.ID, perID[r.ID])
		}
		if want := "report/e2e/restarts/" + r.Tick.UTC().Format(time.RFC3339); r.ID != want || r.Tick.Unix()%3 != 0 || r.Tick.Nanosecond() != 0 {
			t.Fatalf("report id %s tick %s: want the scheduled tick on the 3 s grid", r.ID, r.Tick)
		}
		if r.Title != "pods restarting too often" || r.Threshold != 100 || r.Mode != "total" {
			t.Fatalf("report %s: title %q threshold %d mode %s", r.ID, r.Title, r.Threshold, r.Mode)
		}
		checkOnlyCrashy(t, r, 150)
	}
}

// TestReportIncreaseModeAcrossRestart: the baseline lives in the KV bucket, so
// a new process reports only the restarts gained since the last report.
func TestReportIncreaseModeAcrossRestart(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	kubeconfig := reportKubeconfig(t, cp, "default")
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	crashy := restartingPod(t, cp, "default", "crashy", node.Name, 150)
	restartingPod(t, cp, "default", "calm", node.Name, 5)
	cfg := harness.WriteConfig(t, reportConfig(`
sendReport:
  total: 10
  schedule: "*/2 * * * * *"
  mode: increase
imageAlert:
  enable: false
`))
	startWatcher(t, cp, n, cfg, "w1")
	waitRestarts(t, n, "e2e", "default", "crashy", 150)
	ops := harness.CollectOps(t, n, subject.Ops("e2e", "report", "restarts"))

	r1 := startReport(t, n, cfg, kubeconfig, "r1")
	harness.Eventually(t, 30*time.Second, "a first report counting since pod start, then one after the baseline", func() bool {
		rs := scheduledReports(t, ops)
		return len(rs) >= 2 && rs[len(rs)-1].Since != nil && len(rs[len(rs)-1].Rows) == 0
	})
	first := scheduledReports(t, ops)[0]
	if first.Since != nil || first.Mode != "increase" {
		t.Fatalf("first report %+v: want no baseline yet", first)
	}
	checkOnlyCrashy(t, first, 150)
	if code := r1.Stop(); code != 0 {
		t.Fatalf("report exit code %d on SIGTERM, want 0", code)
	}

	setRestarts(t, cp, crashy, 170)
	waitRestarts(t, n, "e2e", "default", "crashy", 170)
	mark := len(scheduledReports(t, ops))
	startReport(t, n, cfg, kubeconfig, "r2")
	harness.Eventually(t, 30*time.Second, "a report after the restart that lists the pod", func() bool {
		for _, r := range scheduledReports(t, ops)[mark:] {
			if len(r.Rows) > 0 {
				return true
			}
		}
		return false
	})
	for _, r := range scheduledReports(t, ops)[mark:] {
		if len(r.Rows) == 0 {
			continue
		}
		if r.Since == nil {
			t.Fatalf("report %s after the restart has no baseline: the KV bucket was not used", r.ID)
		}
		checkOnlyCrashy(t, r, 20)
	}
}

// TestReportSeedConfig runs the report with the seed's config.yml unchanged:
// its schedule parses, its threshold and title are used, and its lease
// settings (kube-system) work with least-privilege RBAC.
func TestReportSeedConfig(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	kubeconfig := reportKubeconfig(t, cp, "kube-system")
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	restartingPod(t, cp, "default", "crashy", node.Name, 150)
	restartingPod(t, cp, "default", "calm", node.Name, 5)
	cfg := harness.WriteConfig(t, seedConfig(t))
	startWatcher(t, cp, n, cfg, "w1")
	waitRestarts(t, n, "default", "default", "crashy", 150)
	waitRestarts(t, n, "default", "default", "calm", 5)
	ops := harness.CollectOps(t, n, "ops.default.report.>")

	p := startReport(t, n, cfg, kubeconfig, "seed")
	harness.WaitLeader(t, cp.Client, "kube-system", "ops-resource-controller-report", map[string]*harness.Process{"seed": p})
	id := requestReport(t, n, "default")
	r := restartReport(t, ops.WaitFor(t, 10*time.Second, "the requested report", func(m harness.Msg) bool { return m.ID == id }))
	if r.Title != "pod重启次数过多" || r.Threshold != 100 || r.Mode != "total" || r.GroupBy != "pod" {
		t.Fatalf("report %+v: want the seed's title and threshold", r)
	}
	checkOnlyCrashy(t, r, 150)
	if logs := p.Logs(); !strings.Contains(logs, `"schedule":"00 00 10 * * 1"`) || !strings.Contains(logs, `"timezone":"UTC"`) {
		t.Fatalf("the seed's schedule is not the one in use:\n%s", logs)
	}
	if strings.Contains(p.Logs(), "open.feishu.cn") {
		t.Fatal("the report logged the seed's webhook URL")
	}
}

// TestReportCountsInitContainers: a pod in Init:CrashLoopBackOff restarts
// only its init container (500 times); the watcher mirrors it and the report
// lists it, saying which container restarted.
func TestReportCountsInitContainers(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	kubeconfig := reportKubeconfig(t, cp, "default")
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	pod := harness.Pod("default", "stuck", node.Name)
	pod.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "registry.invalid/migrate:1"}}
	p := harness.CreatePod(t, cp.Client, pod)
	harness.SetPodStatus(t, cp.Client, p, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodPending
		s.InitContainerStatuses = []corev1.ContainerStatus{{
			Name: "migrate", Image: "registry.invalid/migrate:1", RestartCount: 500,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				Reason: "Error", ExitCode: 1, FinishedAt: metav1.Now(),
			}},
		}}
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.invalid/app:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	})
	cfg := harness.WriteConfig(t, reportConfig(`
sendReport:
  total: 100
imageAlert:
  enable: false
`))
	startWatcher(t, cp, n, cfg, "w1")
	waitRestarts(t, n, "e2e", "default", "stuck", 500)
	ops := harness.CollectOps(t, n, subject.Ops("e2e", "report", "restarts"))
	rp := startReport(t, n, cfg, kubeconfig, "r1")
	harness.WaitLeader(t, cp.Client, "default", "opswire-report", map[string]*harness.Process{"r1": rp})
	id := requestReport(t, n, "e2e")
	r := restartReport(t, ops.WaitFor(t, 10*time.Second, "the requested report", func(m harness.Msg) bool { return m.ID == id }))
	if len(r.Rows) != 1 || r.Rows[0].Pod != "stuck" || r.Rows[0].Restarts != 500 || len(r.Rows[0].Containers) != 1 {
		t.Fatalf("report rows %+v, want default/stuck with 500 restarts of one container", r.Rows)
	}
	if c := r.Rows[0].Containers[0]; c.Name != "migrate" || c.Kind != events.ContainerInit || c.LastReason != "Error" || c.LastExitCode != 1 {
		t.Fatalf("container %+v, want the init container migrate, last Error 1", c)
	}
}

// TestReportImageAlerts: crossing maxBytes alerts once; growth within the
// cooldown does not; once the cooldown is over, the growth beyond
// growthBytes alerts once more.
func TestReportImageAlerts(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	kubeconfig := reportKubeconfig(t, cp, "default")
	const cooldown = 5 * time.Second
	cfg := harness.WriteConfig(t, reportConfig(fmt.Sprintf(`
sendReport:
  enable: false
imageAlert:
  maxBytes: 1000
  maxPercent: 0
  growthBytes: 100
  cooldown: %s
  msgtitle: "node image storage"
`, cooldown)))
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1.example", nil))
	setImages(t, cp, node.Name, 10, 50) // 500 bytes: under
	startWatcher(t, cp, n, cfg, "w1")
	ops := harness.CollectOps(t, n, "ops.e2e.report.images.>")
	p := startReport(t, n, cfg, kubeconfig, "r1")
	harness.WaitLeader(t, cp.Client, "default", "opswire-report", map[string]*harness.Process{"r1": p})

	setImages(t, cp, node.Name, 50, 24) // 1200 bytes, 50 images: the kubelet's list may be cut
	m := ops.WaitFor(t, 15*time.Second, "the threshold alert", func(m harness.Msg) bool { return m.Type == events.TypeImageAlert })
	if m.Subject != "ops.e2e.report.images.worker-1_example" {
		t.Fatalf("alert subject %s", m.Subject)
	}
	first := imageAlerts(t, ops)[0]
	if first.Reason != "maxBytes" || first.ImageBytes != 1200 || first.ImageCount != 50 || !first.ImagesTruncated ||
		first.Node != "worker-1.example" || first.Title != "node image storage" {
		t.Fatalf("first alert %+v", first)
	}
	if !strings.Contains(first.Note, "at least") || !strings.Contains(first.Note, "--node-status-max-images") {
		t.Fatalf("alert on a truncated list: note %q, want the lower bound explained", first.Note)
	}

	setImages(t, cp, node.Name, 50, 25) // +50: under growthBytes
	setImages(t, cp, node.Name, 50, 30) // 1500: +300, but within the cooldown
	harness.Eventually(t, 5*time.Second, "1500 image bytes in KUBE", func() bool {
		s := lastNode(t, n.JS, subject.Node("e2e", node.Name))
		return s != nil && s.ImageBytes == 1500
	})
	quietUntil := first.Time.Add(cooldown - 500*time.Millisecond)
	if time.Now().After(quietUntil) {
		t.Fatalf("the growth was not written within the cooldown (test too slow)")
	}
	for time.Now().Before(quietUntil) {
		if c := len(imageAlerts(t, ops)); c != 1 {
			t.Fatalf("%d alerts within the cooldown, want 1", c)
		}
		time.Sleep(100 * time.Millisecond)
	}
	harness.Eventually(t, 15*time.Second, "the growth alert after the cooldown", func() bool { return len(imageAlerts(t, ops)) == 2 })
	second := imageAlerts(t, ops)[1]
	if second.Reason != "growth" || second.ImageBytes != 1500 || second.PreviousBytes != 1200 || second.Time.Sub(first.Time) < cooldown {
		t.Fatalf("second alert %+v (first at %s)", second, first.Time)
	}
	if v := p.Metric(`opswire_report_image_alerts_total{reason="maxBytes"}`); v != 1 {
		t.Fatalf("maxBytes alerts metric %v, want 1", v)
	}
	if v := p.Metric(`opswire_report_image_alerts_total{reason="growth"}`); v != 1 {
		t.Fatalf("growth alerts metric %v, want 1", v)
	}
}

// TestReportTickAcrossNATSOutage is issue 19's lost report: NATS is down
// across a scheduled tick and the leader stays leader. Once NATS is back the
// tick's report is stored, exactly once, counted at the source (the report's
// own log lines and metrics, which JetStream's deduplication cannot hide).
func TestReportTickAcrossNATSOutage(t *testing.T) {
	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	kubeconfig := reportKubeconfig(t, cp, "default")
	node := harness.CreateNode(t, cp.Client, harness.Node("worker-1", nil))
	restartingPod(t, cp, "default", "crashy", node.Name, 150)
	restartingPod(t, cp, "default", "calm", node.Name, 5)
	const every = 15 * time.Second
	cfg := harness.WriteConfig(t, reportConfig(`
sendReport:
  total: 100
  schedule: "*/15 * * * * *"
imageAlert:
  enable: false
`))
	startWatcher(t, cp, n, cfg, "w1")
	waitRestarts(t, n, "e2e", "default", "crashy", 150)
	waitRestarts(t, n, "e2e", "default", "calm", 5)
	p := startReport(t, n, cfg, kubeconfig, "r1")
	harness.WaitLeader(t, cp.Client, "default", "opswire-report", map[string]*harness.Process{"r1": p})

	// The tick: the first one at least 5 s away, so NATS goes down before it.
	tick := time.Now().Add(5 * time.Second).Truncate(every).Add(every)
	id := "report/e2e/restarts/" + tick.UTC().Format(time.RFC3339)
	wallClock(t, tick.Add(-2*time.Second))
	n.Stop()
	wallClock(t, tick.Add(8*time.Second)) // the outage spans the tick by 8 s: more than one publish attempt
	if p.Exited() {
		t.Fatalf("report exited during the NATS outage:\n%s", p.Logs())
	}
	if strings.Contains(p.Logs(), `"id":"`+id+`"`) {
		t.Fatalf("report %s logged as stored while NATS was down", id)
	}
	n.Restart(t)

	ops := harness.CollectOps(t, n, subject.Ops("e2e", "report", "restarts"))
	m := ops.WaitFor(t, 15*time.Second, "the report of the tick during the outage", func(m harness.Msg) bool { return m.ID == id })
	r := restartReport(t, m)
	if !r.Tick.Equal(tick) || r.OnDemand {
		t.Fatalf("report %+v, want the scheduled tick %s", r, tick)
	}
	checkOnlyCrashy(t, r, 150)
	// The next tick is stored too: the schedule goes on after the outage.
	nextID := "report/e2e/restarts/" + tick.Add(every).UTC().Format(time.RFC3339)
	ops.WaitFor(t, every+10*time.Second, "the next tick's report", func(m harness.Msg) bool { return m.ID == nextID })

	if c := ops.Count(func(m harness.Msg) bool { return m.ID == id }); c != 1 {
		t.Fatalf("report %s stored %d times", id, c)
	}
	stored := 0
	for _, line := range strings.Split(p.Logs(), "\n") {
		if strings.Contains(line, "restart report stored in OPS") && strings.Contains(line, `"id":"`+id+`"`) {
			stored++
			if !strings.Contains(line, `"outcome":"sent"`) {
				t.Fatalf("the tick's report was not stored by this run: %s", line)
			}
		}
	}
	if stored != 1 {
		t.Fatalf("the report of %s was published %d times by the leader, want exactly 1:\n%s", id, stored, p.Logs())
	}
	if v := p.Metric(`opswire_report_reports_total{outcome="duplicate",trigger="schedule"}`); v > 0 { // -1: no such series
		t.Fatalf("%v scheduled reports were duplicates of a stored one", v)
	}
	if v := p.Metric(`opswire_report_ticks_missed_total`); v != 0 {
		t.Fatalf("%v ticks missed", v)
	}
}

// wallClock waits until the wall clock reaches at: a cron schedule fires at
// wall-clock times, so that is the condition.
func wallClock(t *testing.T, at time.Time) {
	t.Helper()
	harness.Eventually(t, time.Until(at)+5*time.Second, "wall clock "+at.Format(time.RFC3339), func() bool {
		return !time.Now().Before(at)
	})
}

package actor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/opswire/opswire/services/report/internal/restarts"
	"github.com/opswire/opswire/services/report/internal/store"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

const cluster = "unit"

// env is a real embedded NATS server with the KUBE and OPS streams, and the
// cluster whose states it publishes and whose leaders it runs.
type env struct {
	t       *testing.T
	ctx     context.Context
	nc      *nats.Conn
	js      jetstream.JetStream
	rv      int
	cluster string
	// pause is handed to the actors lead builds (nil: never paused).
	pause Pauser
}

func newEnv(t *testing.T) *env {
	t.Helper()
	nc, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if err := natsx.EnsureStreams(ctx, js, config.Default().NATS); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, nc: nc, js: js, cluster: cluster}
}

// publish stores a KUBE state the way the watcher does.
func (e *env) publish(subj, typ string, payload any) {
	e.t.Helper()
	e.rv++
	ev, err := envelope.New(fmt.Sprintf("%s/%d", subj, e.rv), envelope.Source(e.cluster, "watcher"), typ, "", payload, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := natsx.PublishEvent(e.ctx, e.js, subj, ev, time.Second); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) pod(ns, name string, restarts int32) {
	e.publish(subject.Pod(e.cluster, ns, name), events.TypePod, events.PodState{
		Op: events.OpUpsert, UID: ns + "-" + name, Namespace: ns, Name: name, NodeName: "n1", Phase: "Running",
		Owner:      &events.Owner{Kind: "Deployment", Name: name},
		Containers: []events.Container{{Name: "app", Restarts: restarts, LastReason: "OOMKilled", LastExitCode: 137}},
	})
}

func (e *env) node(name string, imageBytes int64) { e.nodeUID(name, name+"-uid", imageBytes) }

func (e *env) nodeUID(name, uid string, imageBytes int64) {
	e.publish(subject.Node(e.cluster, name), events.TypeNode, events.NodeState{
		Op: events.OpUpsert, UID: uid, Name: name, ResourceVersion: strconv.Itoa(e.rv + 1),
		ImageBytes: imageBytes, ImageCount: 50, ImagesTruncated: true, EphemeralBytes: 1 << 40,
	})
}

// opsLog collects OPS messages with an ordered consumer.
type opsLog struct {
	mu   sync.Mutex
	msgs []jetstream.Msg
}

func (e *env) collect(filter string) *opsLog {
	e.t.Helper()
	l := &opsLog{}
	cons, err := e.js.OrderedConsumer(e.ctx, subject.OpsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		e.t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		l.mu.Lock()
		l.msgs = append(l.msgs, m)
		l.mu.Unlock()
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cc.Stop)
	return l
}

func (l *opsLog) reports(t *testing.T) []events.RestartReport {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []events.RestartReport
	for _, m := range l.msgs {
		if m.Headers().Get(envelope.HeaderType) != events.TypeRestartReport {
			continue
		}
		var r events.RestartReport
		if _, err := envelope.Decode(m.Headers(), m.Data(), events.TypeRestartReport, &r); err != nil {
			t.Fatalf("report in OPS does not decode: %v", err)
		}
		out = append(out, r)
	}
	return out
}

func (l *opsLog) alerts(t *testing.T) []events.ImageAlert {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []events.ImageAlert
	for _, m := range l.msgs {
		var a events.ImageAlert
		if _, err := envelope.Decode(m.Headers(), m.Data(), events.TypeImageAlert, &a); err != nil {
			continue
		}
		out = append(out, a)
	}
	return out
}

// lead starts one leader term of a fresh actor; the returned stop ends it.
func (e *env) lead(cfg *config.Config) (a *Actor, reg *prometheus.Registry, stop func()) {
	e.t.Helper()
	reg = prometheus.NewRegistry()
	a, err := New(Deps{Config: cfg, Cluster: e.cluster, JS: e.js, NC: e.nc, MaxPayload: e.nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: reg, Getenv: func(string) string { return "" }, Pause: e.pause})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Lead(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Lead: %v", err)
		}
	}
	e.t.Cleanup(stop)
	testkit.Eventually(e.t, 10*time.Second, "leader ready", func() bool { return a.serving.Load() && a.Ready() == nil })
	return a, reg, stop
}

func testConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cluster.Name = cluster
	return cfg
}

func (e *env) request() RunReply {
	e.t.Helper()
	var reply RunReply
	testkit.Eventually(e.t, 10*time.Second, "an answer to the report request", func() bool {
		m, err := e.nc.Request(subject.Ctl(e.cluster, Service, "run"), nil, 5*time.Second)
		if err != nil {
			return false // no responder yet
		}
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			e.t.Fatalf("reply %q: %v", m.Data, err)
		}
		return true
	})
	return reply
}

func TestReportsOnScheduleAndOnRequest(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	e.pod("shop", "calm", 5)
	ops := e.collect("ops.>")
	cfg := testConfig(t, "sendReport:\n  total: 100\n  schedule: \"@every 1s\"\n  msgtitle: restarts\nimageAlert:\n  enable: false\n")
	a, _, _ := e.lead(cfg)

	reply := e.request()
	if reply.Error != "" || !strings.HasPrefix(reply.ID, "report/restarts/run/") || reply.Rows != 1 {
		t.Fatalf("reply %+v", reply)
	}
	var onDemand, scheduled []events.RestartReport
	testkit.Eventually(t, 10*time.Second, "the requested report and two scheduled ones in OPS", func() bool {
		onDemand, scheduled = nil, nil
		for _, r := range ops.reports(t) {
			if r.OnDemand {
				onDemand = append(onDemand, r)
			} else {
				scheduled = append(scheduled, r)
			}
		}
		return len(onDemand) == 1 && len(scheduled) >= 2
	})
	if onDemand[0].ID != reply.ID {
		t.Fatalf("on-demand report id %s, reply said %s", onDemand[0].ID, reply.ID)
	}
	for _, r := range append(onDemand, scheduled...) {
		if len(r.Rows) != 1 || r.Rows[0].Pod != "crashy" || r.Rows[0].Restarts != 150 || r.Title != "restarts" || r.PodsSeen != 2 {
			t.Fatalf("report %+v: want exactly shop/crashy with 150 restarts", r)
		}
	}
	for i, r := range scheduled {
		if r.ID != ScheduledID(cluster, r.Tick) || r.Tick.Nanosecond() != 0 {
			t.Fatalf("scheduled report id %s tick %s: the id must name the whole-second tick", r.ID, r.Tick)
		}
		if i > 0 && !r.Tick.After(scheduled[i-1].Tick) {
			t.Fatalf("ticks not increasing: %s then %s", scheduled[i-1].Tick, r.Tick)
		}
	}
	if n := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "sent")); n < 2 {
		t.Fatalf("opswire_report_reports_total{trigger=schedule,outcome=sent} = %v", n)
	}
}

func TestIncreaseModeSurvivesARestart(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	ops := e.collect("ops.*.report.restarts")
	cfg := testConfig(t, "sendReport:\n  total: 10\n  schedule: \"@every 1s\"\n  mode: increase\nimageAlert:\n  enable: false\n")
	_, _, stop := e.lead(cfg)
	testkit.Eventually(t, 10*time.Second, "a first report with the count since pod start", func() bool {
		for _, r := range ops.reports(t) {
			if len(r.Rows) == 1 && r.Rows[0].Restarts == 150 && r.Since == nil {
				return true
			}
		}
		return false
	})
	testkit.Eventually(t, 10*time.Second, "a report after the baseline (nothing gained)", func() bool {
		rs := ops.reports(t)
		return len(rs) >= 2 && rs[len(rs)-1].Since != nil && len(rs[len(rs)-1].Rows) == 0
	})
	stop()
	seen := len(ops.reports(t))
	e.pod("shop", "crashy", 170)

	e.lead(cfg) // a new process: only the KV bucket remembers
	testkit.Eventually(t, 10*time.Second, "a report of the increase after the restart", func() bool {
		for _, r := range ops.reports(t)[seen:] {
			if len(r.Rows) == 1 {
				return true
			}
		}
		return false
	})
	for _, r := range ops.reports(t)[seen:] {
		if len(r.Rows) == 1 && r.Rows[0].Restarts != 20 {
			t.Fatalf("after the restart a report lists %d restarts, want the increase 20", r.Rows[0].Restarts)
		}
		if r.Since == nil {
			t.Fatalf("report %s after the restart has no baseline time", r.ID)
		}
	}
}

func TestCatchUpSendsTheMissedTickOnce(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	ops := e.collect("ops.*.report.restarts")
	// A schedule that fires every hour: no tick will happen during the test,
	// so any scheduled report is a catch-up.
	cfg := testConfig(t, "sendReport:\n  schedule: \"@hourly\"\n  catchUp: 2h\nnats:\n  duplicates: 3h\nimageAlert:\n  enable: false\n")
	a, _, stop := e.lead(cfg)
	e.request() // answered only after the catch-up check
	stop()
	if n := len(scheduledOnly(ops.reports(t))); n != 0 {
		t.Fatalf("a first leader without any recorded tick sent %d reports", n)
	}
	// Pretend a previous leader sent the tick before the last one.
	prevTick := a.sched.Next(time.Now().Add(-2 * time.Hour))
	if err := kvStore(t, e).SetLastTick(e.ctx, prevTick); err != nil {
		t.Fatal(err)
	}
	_, _, stop = e.lead(cfg)
	missed := a.sched.Next(prevTick)
	e.request()
	testkit.Eventually(t, 10*time.Second, "the missed tick's report", func() bool { return len(scheduledOnly(ops.reports(t))) == 1 })
	if r := scheduledOnly(ops.reports(t))[0]; r.ID != ScheduledID(cluster, missed) {
		t.Fatalf("caught-up report %s, want %s", r.ID, ScheduledID(cluster, missed))
	}
	stop()
	// A third leader finds the tick recorded: nothing more. Counted at that
	// leader (its own metrics), not in OPS: the stream would drop a resend of
	// the tick as a duplicate of the stored one.
	third, _, stop := e.lead(cfg)
	e.request() // answered only after the catch-up check
	stop()
	for _, o := range []string{"sent", "duplicate", "failed", "overbudget"} {
		if n := testutil.ToFloat64(third.m.reports.WithLabelValues(triggerSchedule, o)); n != 0 {
			t.Fatalf("the third leader: reports_total{trigger=schedule,outcome=%s} = %v, want no scheduled run at all", o, n)
		}
	}
	if n := len(scheduledOnly(ops.reports(t))); n != 1 {
		t.Fatalf("%d reports after a second takeover, want still 1", n)
	}
}

// A leader stopped between storing a tick's report and recording it (its
// baseline and tick writes cut off) leaves the tick to the next leader's
// catch-up, whose report JetStream then drops as a duplicate. The counts the
// new leader holds were never published: they must not become the baseline,
// or the restarts gained since the stored report go unreported for good.
func TestCaughtUpDuplicateKeepsTheBaseline(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 170)
	cfg := testConfig(t, "sendReport:\n  total: 10\n  schedule: \"@hourly\"\n  mode: increase\n  catchUp: 2h\n"+
		"nats:\n  duplicates: 3h\nimageAlert:\n  enable: false\n")
	sched, err := New(Deps{Config: cfg, Cluster: cluster, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	prevTick := sched.sched.Next(time.Now().Add(-2 * time.Hour))
	missed := sched.sched.Next(prevTick)
	// What the stopped leader got into KV (the previous tick's) and OPS (its
	// report of the missed tick, made before the pod's last restarts).
	st := kvStore(t, e)
	old := &restarts.Baseline{Time: prevTick, Pods: map[string]map[string]int32{"shop-crashy": {"app": 150}}}
	if err := st.SaveBaseline(e.ctx, old, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLastTick(e.ctx, prevTick); err != nil {
		t.Fatal(err)
	}
	stored := events.RestartReport{ID: ScheduledID(cluster, missed), Tick: missed, Since: &prevTick, Rows: []events.RestartRow{}}
	ev, err := envelope.New(stored.ID, envelope.Source(cluster, Service), events.TypeRestartReport, "restarts", stored, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsx.PublishEvent(e.ctx, e.js, subject.Ops(cluster, Service, "restarts"), ev, time.Second); err != nil {
		t.Fatal(err)
	}

	a, _, _ := e.lead(cfg)
	reply := e.request() // answered only after the catch-up
	if n := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "duplicate")); n != 1 {
		t.Fatalf("opswire_report_reports_total{trigger=schedule,outcome=duplicate} = %v, want the caught-up tick", n)
	}
	if reply.Error != "" || reply.Rows != 1 {
		t.Fatalf("reply %+v: want the 20 restarts since %s in one row", reply, prevTick)
	}
	b, err := st.LoadBaseline(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Time.Equal(prevTick) || b.Pods["shop-crashy"]["app"] != 150 {
		t.Fatalf("baseline in KV %+v, want the one of %s kept", b, prevTick)
	}
	if last, ok, err := st.LastTick(e.ctx); err != nil || !ok || !last.Equal(missed) {
		t.Fatalf("last tick %s %v %v, want the caught-up %s recorded", last, ok, err, missed)
	}
}

func TestImageAlertsAndTheirMemory(t *testing.T) {
	e := newEnv(t)
	ops := e.collect("ops.*.report.images.>")
	cfg := testConfig(t, "sendReport:\n  enable: false\nimageAlert:\n  maxBytes: 1000\n  maxPercent: 0\n  growthBytes: 100\n  cooldown: 1500ms\n")
	e.node("node.a", 500)
	_, _, stop := e.lead(cfg)
	e.node("node.a", 1200) // crosses maxBytes
	testkit.Eventually(t, 10*time.Second, "the first alert", func() bool { return len(ops.alerts(t)) == 1 })
	first := ops.alerts(t)[0]
	if first.Reason != "maxBytes" || first.ImageBytes != 1200 || !first.ImagesTruncated || first.Node != "node.a" {
		t.Fatalf("alert %+v", first)
	}
	stop()
	// A new leader loads the memory: the same state does not alert again,
	// and growth within the cooldown is held back until the cooldown ends.
	_, _, _ = e.lead(cfg)
	e.node("node.a", 1400)
	testkit.Eventually(t, 10*time.Second, "the growth alert once the cooldown is over", func() bool { return len(ops.alerts(t)) == 2 })
	second := ops.alerts(t)[1]
	if second.Reason != "growth" || second.PreviousBytes != 1200 || second.ImageBytes != 1400 {
		t.Fatalf("second alert %+v", second)
	}
	if gap := second.Time.Sub(first.Time); gap < 1500*time.Millisecond {
		t.Fatalf("second alert %s after the first, within the cooldown", gap)
	}
}

func scheduledOnly(rs []events.RestartReport) []events.RestartReport {
	var out []events.RestartReport
	for _, r := range rs {
		if !r.OnDemand {
			out = append(out, r)
		}
	}
	return out
}

// Clusters on one NATS system share its OPS stream, which deduplicates
// Nats-Msg-Id across all its subjects: two clusters' reports of the same
// tick must not share an id.
func TestScheduledIDNamesTheCluster(t *testing.T) {
	tick := time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)
	if a, b := ScheduledID("a", tick), ScheduledID("b", tick); a == b {
		t.Fatalf("clusters a and b share the id %s", a)
	}
	if got, want := ScheduledID("prod", tick), "report/prod/restarts/2025-01-06T02:00:00Z"; got != want {
		t.Fatalf("ScheduledID = %s, want %s", got, want)
	}
}

// TestClustersOnOneNATSStoreTheirOwnReportOfATick: two clusters on one
// NATS system, one OPS stream, the same schedule. Each tick gets one report
// per cluster, each stored at the first publish under its own id: none is
// answered as a duplicate of the other cluster's report, and none is taken
// for the suppression of a foreign message (which republishes it under a
// fallback id and counts opswire_publish_suppressed_total, a sign of
// tampering).
func TestClustersOnOneNATSStoreTheirOwnReportOfATick(t *testing.T) {
	foreign := func() float64 { return testutil.ToFloat64(natsx.Suppressed.WithLabelValues("foreign")) }
	before := foreign()
	e := newEnv(t)
	ops := e.collect("ops.*.report.restarts")
	cfg := testConfig(t, "sendReport:\n  schedule: \"@every 1s\"\nimageAlert:\n  enable: false\n")
	leaders := map[string]*Actor{}
	for _, name := range []string{"a", "b"} {
		ce := *e
		ce.cluster = name
		ce.pod("shop", "crashy", 150)
		c := *cfg
		c.Cluster.Name = name
		leaders[name], _, _ = ce.lead(&c)
	}
	// tick → cluster (the subject's) → Nats-Msg-Id it was stored under
	ticks := map[time.Time]map[string]string{}
	testkit.Eventually(t, 10*time.Second, "two ticks reported by both clusters", func() bool {
		ops.mu.Lock()
		defer ops.mu.Unlock()
		clear(ticks)
		both := 0
		for _, m := range ops.msgs {
			var r events.RestartReport
			if _, err := envelope.Decode(m.Headers(), m.Data(), events.TypeRestartReport, &r); err != nil || r.OnDemand {
				continue
			}
			if ticks[r.Tick] == nil {
				ticks[r.Tick] = map[string]string{}
			}
			ticks[r.Tick][strings.Split(m.Subject(), ".")[1]] = m.Headers().Get(envelope.HeaderMsgID)
			if len(ticks[r.Tick]) == 2 {
				both++
			}
		}
		return both >= 2
	})
	for tick, ids := range ticks {
		if len(ids) == 2 && ids["a"] == ids["b"] {
			t.Fatalf("tick %s: both clusters' reports stored under the id %s", tick, ids["a"])
		}
	}
	for name, a := range leaders {
		if n := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "duplicate")); n != 0 {
			t.Errorf("cluster %s: %v scheduled reports answered as duplicates", name, n)
		}
	}
	if n := foreign() - before; n != 0 {
		t.Errorf("%v reports taken for suppressed by a foreign message", n)
	}
}

// opsReadFails is the report's JetStream context while a JetStream API read
// of OPS fails (a request timing out under load, a connection flap): the
// publishes go through, reading a message back does not.
type opsReadFails struct {
	jetstream.JetStream
	failing atomic.Bool
}

func (j *opsReadFails) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if name == subject.OpsStream && j.failing.Load() {
		return nil, errors.New("JetStream API: timeout")
	}
	return j.JetStream.Stream(ctx, name)
}

// TestCaughtUpTickIsNotStoredTwiceWhenTheReadBackFails: the old leader
// stored tick T's report but died before recording it; the new leader
// catches T up and JetStream acknowledges it as a duplicate, which is the
// design (one report per tick). If reading the holder back fails, the
// duplicate must stand: a fallback Nats-Msg-Id would store T a second time
// and the notifier would deliver both.
func TestCaughtUpTickIsNotStoredTwiceWhenTheReadBackFails(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	cfg := testConfig(t, "sendReport:\n  schedule: \"@hourly\"\n  catchUp: 2h\nnats:\n  duplicates: 3h\nimageAlert:\n  enable: false\n")
	probe, err := New(Deps{Config: cfg, Cluster: cluster, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	prevTick := probe.sched.Next(time.Now().Add(-2 * time.Hour))
	missed := probe.sched.Next(prevTick)
	st := kvStore(t, e)
	if err := st.SetLastTick(e.ctx, prevTick); err != nil {
		t.Fatal(err)
	}
	// The old leader's report of the missed tick, stored, not recorded.
	stored := events.RestartReport{ID: ScheduledID(cluster, missed), Tick: missed, Rows: []events.RestartRow{}}
	ev, err := envelope.New(stored.ID, envelope.Source(cluster, Service), events.TypeRestartReport, "restarts", stored, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	subj := subject.Ops(cluster, Service, "restarts")
	if _, err := natsx.PublishEvent(e.ctx, e.js, subj, ev, time.Second); err != nil {
		t.Fatal(err)
	}

	js := &opsReadFails{JetStream: e.js}
	js.failing.Store(true)
	reg := prometheus.NewRegistry()
	a, err := New(Deps{Config: cfg, Cluster: cluster, JS: js, NC: e.nc, MaxPayload: e.nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: reg, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Lead(ctx) }()
	defer func() { cancel(); <-done }()
	// Serving comes after the catch-up's publish was answered, and OPS
	// stores a message before it acks it: counting now sees any second copy.
	testkit.Eventually(t, 20*time.Second, "the new leader's catch-up done", func() bool { return a.serving.Load() })
	if got := testutil.ToFloat64(a.m.reports.WithLabelValues(triggerSchedule, "duplicate")); got != 1 {
		t.Errorf("reports{schedule,duplicate} = %v, want 1", got)
	}
	s, err := e.js.Stream(e.ctx, subject.OpsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(e.ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subj]; n != 1 {
		t.Fatalf("OPS holds %d scheduled reports of tick %s, want 1 (the catch-up's duplicate was republished under a fallback id)", n, missed)
	}
}

// leadUntilServing starts a.Lead and waits until it serves, failing the test
// if Lead returns first (the process would exit: every replica, on the same
// state, would crash-loop). It returns a stop function.
func leadUntilServing(t *testing.T, e *env, a *Actor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- a.Lead(ctx) }()
	deadline := time.After(20 * time.Second)
	for !a.serving.Load() {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("Lead returned while still leading: %v", err)
		case <-deadline:
			cancel()
			<-done
			t.Fatal("the leader is not serving 20 s after it started")
		case <-time.After(20 * time.Millisecond):
		}
	}
	return func() { cancel(); <-done }
}

// TestMalformedBaselineTimeDoesNotStopTheLeader: one malformed
// <cluster>.baseline.time in KV is no baseline (logged, counted), not an
// error out of Lead, which would make the process exit and every replica
// crash-loop on the same key.
func TestMalformedBaselineTimeDoesNotStopTheLeader(t *testing.T) {
	e := newEnv(t)
	e.pod("shop", "crashy", 150)
	kv, err := store.Open(e.ctx, e.js, config.Default().NATS.Replicas)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(e.ctx, cluster+".baseline.time", []byte("not-a-time")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "sendReport:\n  schedule: \"@hourly\"\n  mode: increase\nimageAlert:\n  enable: false\n")
	a, err := New(Deps{Config: cfg, Cluster: cluster, JS: e.js, NC: e.nc, MaxPayload: e.nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer leadUntilServing(t, e, a)()
	if got := testutil.ToFloat64(a.m.storeErrors.WithLabelValues("baseline")); got != 1 {
		t.Errorf("store_errors{baseline} = %v, want 1", got)
	}
}

// kvFlaky is a JetStream context whose KV bucket cannot be opened the first
// fails times (a JetStream API timeout at the start of a term).
type kvFlaky struct {
	jetstream.JetStream
	fails atomic.Int32
}

func (j *kvFlaky) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if j.fails.Add(-1) >= 0 {
		return nil, errors.New("JetStream API: timeout")
	}
	return j.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
}

// TestTransientKVErrorAtTermStartIsRetried: the bucket failing to open at
// the start of a term is retried within the term, not returned from Lead.
func TestTransientKVErrorAtTermStartIsRetried(t *testing.T) {
	e := newEnv(t)
	js := &kvFlaky{JetStream: e.js}
	js.fails.Store(2)
	cfg := testConfig(t, "sendReport:\n  schedule: \"@hourly\"\nimageAlert:\n  enable: false\n")
	a, err := New(Deps{Config: cfg, Cluster: cluster, JS: js, NC: e.nc, MaxPayload: e.nc.MaxPayload(),
		Log: zerolog.Nop(), Registry: prometheus.NewRegistry(), Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer leadUntilServing(t, e, a)()
	if got := testutil.ToFloat64(a.m.storeErrors.WithLabelValues("open")); got != 2 {
		t.Errorf("store_errors{open} = %v, want 2", got)
	}
}

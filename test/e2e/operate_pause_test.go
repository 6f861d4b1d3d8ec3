package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/pause"
	"github.com/opswire/opswire/test/harness"
)

// operateCommands are the command lines of docs/operate.md, each with the
// test that runs it as written (sh -c, with opswire and kubectl-opswire on
// PATH). Every line of the doc must be here, and each test checks it ran
// all of its own.
var operateCommands = map[string]string{
	`opswire pause cordon --for 30s --reason "node pool upgrade"`: "TestOperatePauseCordon",
	`opswire status`:                                "TestOperatePauseCordon",
	`opswire status -o json`:                        "TestOperatePauseCordon",
	`kubectl-opswire status`:                        "TestOperatePauseCordon",
	`opswire pause cordon --reason "incident 1234"`: "TestOperatePauseCordon",
	`opswire resume cordon`:                         "TestOperatePauseCordon",
	`opswire pause all --reason "etcd maintenance"`: "TestOperatePauseCleanup",
	`opswire resume all`:                            "TestOperatePauseCleanup",
}

// checkOperateDoc fails t when docs/operate.md holds a command no test runs.
func checkOperateDoc(t *testing.T) {
	t.Helper()
	documented := docOperateCommands(t)
	if len(documented) == 0 {
		t.Fatal("docs/operate.md has no opswire command")
	}
	for _, l := range documented {
		if _, ok := operateCommands[l]; !ok {
			t.Fatalf("docs/operate.md: %q is run by no test (add it to operateCommands and run it)", l)
		}
	}
}

// opswireRunner returns a runner of operateCommands lines as the operator
// user of n, and a check, for the end of the test, that every line
// operateCommands gives to this test was run.
func opswireRunner(t *testing.T, n *harness.NATS, pw map[string]string) (run func(line string) string, allRun func()) {
	t.Helper()
	bin := harness.Build(t, "opswire")
	dir := t.TempDir()
	for _, name := range []string{"opswire", "kubectl-opswire"} {
		if err := os.Symlink(bin, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	ran := map[string]bool{}
	run = func(line string) string {
		t.Helper()
		if operateCommands[line] != t.Name() {
			t.Fatalf("%q is not one of %s's operateCommands", line, t.Name())
		}
		ran[line] = true
		cmd := exec.Command("sh", "-c", line)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "OPSWIRE_NATS_URL="+n.URL,
			"OPSWIRE_NATS_PASSWORD="+pw["operator"], "OPSWIRE_CLUSTER=e2e", "USER=oncall")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("$ %s\n%s", line, out)
		return string(out)
	}
	allRun = func() {
		t.Helper()
		for l, name := range operateCommands {
			if name == t.Name() && !ran[l] {
				t.Errorf("%q (docs/operate.md) was not run", l)
			}
		}
	}
	return run, allRun
}

// docOperateCommands returns the lines of docs/operate.md's sh blocks that
// run opswire (or its kubectl plugin binary).
func docOperateCommands(t *testing.T) []string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(mustRead(t, filepath.Join(root, "docs", "operate.md"))))
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "```"):
			in = !in && (l == "```sh" || l == "```bash")
		case in && (strings.HasPrefix(l, "opswire ") || strings.HasPrefix(l, "kubectl-opswire ")):
			out = append(out, l)
		}
	}
	return out
}

// TestOperatePauseCordon is issue 38's pause acceptance on deploy/'s NATS
// users: two cordon replicas (leader and standby) as their own user and
// ServiceAccount, the opswire command as operator. `opswire pause cordon
// --for 30s` stops every cordon write (counted at the API: anything but a
// GET, Lease renewals aside) within 1 s while the decisions the pause holds
// back are published as skipped/paused; the leader is SIGKILLed during the
// pause and its successor stays paused; the held-back writes happen by
// themselves once the 30 s are over. Then a pause without --for is ended
// early by `opswire resume cordon`.
func TestOperatePauseCordon(t *testing.T) {
	checkOperateDoc(t)

	cp := harness.StartControlPlane(t)
	n, pw := harness.StartDeployedNATS(t)
	c := cp.Client
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		harness.CreateNode(t, c, harness.Node(name, nil))
	}
	cfg := harness.WriteConfig(t, cordonConfig("2s", "  maxCordonedPercent: 100\n"))
	env := func(user string) []string {
		e := []string{"OPSWIRE_NATS_USER=" + user, "OPSWIRE_NATS_PASSWORD=" + pw[user]}
		if user != "watcher" {
			e = append(e, "OPSWIRE_MANAGE_STREAMS=false")
		}
		return e
	}
	w := harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "w1", Env: env("watcher")})
	w.WaitReady(t, 60*time.Second)

	// The decisions, read live as the audit user.
	audit := connectAs(t, n, "audit", pw["audit"])
	var mu sync.Mutex
	var decisions []events.CordonDecision
	if _, err := audit.nc.Subscribe("ops.e2e.cordon.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, ".cordon.intent.") {
			return
		}
		var d events.CordonDecision
		if json.Unmarshal(m.Data, &d) == nil {
			mu.Lock()
			decisions = append(decisions, d)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := audit.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	paused := func(node, action string) int {
		mu.Lock()
		defer mu.Unlock()
		k := 0
		for _, d := range decisions {
			if d.Node == node && d.Verb == "skipped" && d.Code == "paused" && d.Action == action {
				k++
			}
		}
		return k
	}

	proxy := harness.StartAPIProxy(t, cp)
	kc := proxy.Kubeconfig(t, cordonRBAC(t, cp, "default"))
	replicas := map[string]*harness.Process{}
	for _, id := range []string{"r1", "r2"} {
		replicas[id] = harness.StartService(t, "cordon", harness.ServiceOptions{Config: cfg, Kubeconfig: kc, NATSURL: n.URL, ID: id, Env: env("cordon")})
	}
	leader, _ := harness.WaitLeader(t, c, "default", "opswire-cordon", replicas)

	marked := func(node string) bool {
		nd, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return err == nil && cordonMarked(nd)
	}
	// Before any pause: node-a cordoned at maxPods (5).
	cordonFill(t, c, "node-a", 0, 5)
	harness.Eventually(t, 20*time.Second, "node-a cordoned", func() bool { return marked("node-a") })

	run, allRun := opswireRunner(t, n, pw)
	writes := func(from, to time.Time) []harness.APIRequest {
		return proxy.Requests(func(r harness.APIRequest) bool {
			return r.Method != "GET" && !strings.Contains(r.Path, "/leases/") && !r.Sent.Before(from) && r.Sent.Before(to)
		})
	}

	run(`opswire pause cordon --for 30s --reason "node pool upgrade"`)
	pausedAt := time.Now()
	var st []struct {
		Actor  string    `json:"actor"`
		Paused bool      `json:"paused"`
		Via    string    `json:"via"`
		Until  time.Time `json:"until"`
		By     string    `json:"by"`
		Reason string    `json:"reason"`
	}
	if err := json.Unmarshal([]byte(run(`opswire status -o json`)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st) != 4 || st[0].Actor != "cordon" || !st[0].Paused || st[0].Via != "cordon" || st[0].By != "oncall" ||
		st[0].Reason != "node pool upgrade" || st[1].Paused {
		t.Fatalf("status: %+v", st)
	}
	until := st[0].Until
	if d := until.Sub(pausedAt); d < 25*time.Second || d > 31*time.Second {
		t.Fatalf("until %v is %v after the pause, want 30 s", until, d)
	}
	if out := run(`opswire status`); !strings.Contains(out, "cordon ") || !strings.Contains(out, "node pool upgrade") {
		t.Fatalf("status table lacks the pause:\n%s", out)
	}
	if out := run(`kubectl-opswire status`); !strings.Contains(out, "node pool upgrade") {
		t.Fatalf("kubectl-opswire status lacks the pause:\n%s", out)
	}
	if v := replicas[leader].Metric(`opswire_paused{actor="cordon"}`); v != 1 {
		t.Errorf("leader's opswire_paused{actor=\"cordon\"} = %v, want 1", v)
	}

	// Decisions the pause holds back: a new cordon (node-b) and a release (node-a).
	cordonFill(t, c, "node-b", 0, 5)
	cordonDrain(t, c, "node-a", 0, 4)
	harness.Eventually(t, 15*time.Second, "node-b's cordon and node-a's uncordon published as skipped/paused", func() bool {
		return paused("node-b", "cordon") >= 1 && paused("node-a", "uncordon") >= 1
	})

	// The leader dies; the standby leads, paused too.
	replicas[leader].Kill()
	delete(replicas, leader)
	next, p := harness.WaitLeader(t, c, "default", "opswire-cordon", replicas)
	t.Logf("leader %s SIGKILLed during the pause; %s leads", leader, next)
	if time.Now().After(until.Add(-2 * time.Second)) {
		t.Fatalf("the failover outlasted the pause (ended %v): the test proves nothing", until)
	}
	harness.Eventually(t, 10*time.Second, "the new leader paused", func() bool { return p.Metric(`opswire_paused{actor="cordon"}`) == 1 })

	// By themselves after the 30 s: node-b cordoned, node-a released.
	harness.Eventually(t, time.Until(until)+15*time.Second, "node-b cordoned and node-a released after the pause", func() bool {
		return marked("node-b") && !marked("node-a")
	})
	if w := writes(pausedAt.Add(time.Second), until); len(w) != 0 {
		t.Fatalf("%d cordon writes during the pause (from 1 s after it started to its end): %+v", len(w), w)
	}
	first := writes(until, time.Now())
	if len(first) == 0 {
		t.Fatal("no write after the pause, yet the nodes changed")
	}
	t.Logf("paused %v; first write %v after the pause's end: %s %s", until.Sub(pausedAt).Round(time.Millisecond),
		first[0].Sent.Sub(until).Round(time.Millisecond), first[0].Method, first[0].Path)
	if p.Metric(`opswire_paused{actor="cordon"}`) != 0 {
		t.Error("opswire_paused still 1 after the pause's end")
	}

	// A pause until resumed, ended early.
	run(`opswire pause cordon --reason "incident 1234"`)
	again := time.Now()
	cordonFill(t, c, "node-c", 0, 5)
	harness.Eventually(t, 15*time.Second, "node-c's cordon published as skipped/paused", func() bool { return paused("node-c", "cordon") >= 1 })
	if marked("node-c") {
		t.Fatal("node-c cordoned while paused")
	}
	run(`opswire resume cordon`)
	resumed := time.Now()
	harness.Eventually(t, 10*time.Second, "node-c cordoned after opswire resume", func() bool { return marked("node-c") })
	if w := writes(again.Add(time.Second), resumed); len(w) != 0 {
		t.Fatalf("%d cordon writes during the second pause: %+v", len(w), w)
	}
	allRun()
}

// TestOperatePauseCleanup: with deploy/'s NATS users, `opswire pause all`
// holds cleanup too: an evicted pod is not deleted (no DELETE reaches the
// API from 1 s after the pause), its removal is published once as
// skipped/paused, and `opswire resume all` lets cleanup delete it.
func TestOperatePauseCleanup(t *testing.T) {
	checkOperateDoc(t)
	cp := harness.StartControlPlane(t)
	n, pw := harness.StartDeployedNATS(t)
	c := cp.Client
	worker := harness.CreateNode(t, c, harness.Node("worker-1", nil))
	harness.CreateNamespace(t, c, "apps")
	cfg := harness.WriteConfig(t, cleanupConfig())
	env := func(user string) []string {
		e := []string{"OPSWIRE_NATS_USER=" + user, "OPSWIRE_NATS_PASSWORD=" + pw[user]}
		if user != "watcher" {
			e = append(e, "OPSWIRE_MANAGE_STREAMS=false")
		}
		return e
	}
	w := harness.StartService(t, "watcher", harness.ServiceOptions{Config: cfg, Kubeconfig: cp.Kubeconfig, NATSURL: n.URL, ID: "w1", Env: env("watcher")})
	w.WaitReady(t, 60*time.Second)
	audit := connectAs(t, n, "audit", pw["audit"])
	var mu sync.Mutex
	var skipped []events.CleanupDecision
	if _, err := audit.nc.Subscribe("ops.e2e.cleanup.skipped.>", func(m *nats.Msg) {
		var d events.CleanupDecision
		if json.Unmarshal(m.Data, &d) == nil {
			mu.Lock()
			skipped = append(skipped, d)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := audit.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	proxy := harness.StartAPIProxy(t, cp)
	cl := harness.StartService(t, "cleanup", harness.ServiceOptions{Config: cfg, Kubeconfig: proxy.Kubeconfig(t, cleanupKubeconfig(t, cp)),
		NATSURL: n.URL, ID: "a", Env: env("cleanup")})
	harness.WaitLeader(t, c, "default", "opswire-cleanup", map[string]*harness.Process{"a": cl})

	run, allRun := opswireRunner(t, n, pw)
	run(`opswire pause all --reason "etcd maintenance"`)
	pausedAt := time.Now()
	harness.Eventually(t, 5*time.Second, "cleanup paused", func() bool { return cl.Metric(`opswire_paused{actor="cleanup"}`) == 1 })
	p := harness.CreatePod(t, c, harness.Pod("apps", "victim", worker.Name))
	evict(t, cp, p)
	harness.Eventually(t, 15*time.Second, "the removal published as skipped/paused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range skipped {
			if d.Pod == "victim" && d.Reason == "paused" && strings.Contains(d.Message, "etcd maintenance") {
				return true
			}
		}
		return false
	})
	if !harness.PodExists(t, c, "apps", "victim") {
		t.Fatal("the evicted pod was deleted while paused")
	}
	run(`opswire resume all`)
	resumed := time.Now()
	harness.Eventually(t, 10*time.Second, "the evicted pod deleted after opswire resume all", func() bool { return !harness.PodExists(t, c, "apps", "victim") })
	if w := proxy.Requests(func(r harness.APIRequest) bool {
		return r.Method != "GET" && !strings.Contains(r.Path, "/leases/") && r.Sent.After(pausedAt.Add(time.Second)) && r.Sent.Before(resumed)
	}); len(w) != 0 {
		t.Fatalf("%d cleanup writes while paused: %+v", len(w), w)
	}
	mu.Lock()
	k := 0
	for _, d := range skipped {
		if d.Pod == "victim" && d.Reason == "paused" {
			k++
		}
	}
	mu.Unlock()
	if k != 1 {
		t.Errorf("the held-back removal was published %d times, want once", k)
	}
	allRun()
}

// TestDeployPauseRecords: with deploy/'s NATS users, each actor (cordon,
// cleanup, report, notifier) creates the bucket opswire-pause if missing
// and watches it, operator writes and deletes pause
// records, audit reads them, and nobody else can write one (the refusals
// through the raw subjects are in TestDeployOperatorCommands).
func TestDeployPauseRecords(t *testing.T) {
	t.Run("cluster", func(t *testing.T) {
		n, pw := harness.StartDeployedNATS(t)
		checkPauseRecords(t, n, pw, pause.Actors, []string{"audit", "watcher", "cordon", "cleanup", "report", "notifier"})
	})
	// The fleet hub runs only the notifier (for every cluster): its
	// auth.conf lets it follow the pause of the hub's cluster.name.
	t.Run("fleet-hub", func(t *testing.T) {
		root, err := harness.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		pw := harness.DeployPasswords()
		for _, u := range []string{"leaf_a", "leaf_b"} {
			pw[u] = "p" + u + "-7c41e2d9a8b3"
		}
		for u, p := range pw {
			t.Setenv("NATS_"+strings.ToUpper(u)+"_PASSWORD", p)
		}
		n := harness.StartNATS(t, harness.WithConfigFile(filepath.Join(root, "deploy", "overlays", "fleet-hub", "auth.conf")))
		checkPauseRecords(t, n, pw, []string{"notifier"}, []string{"audit", "notifier"})
	})
}

// checkPauseRecords: the actors create (the first) and watch the bucket,
// operator pauses and resumes, audit reads, and none of others can write.
func checkPauseRecords(t *testing.T, n *harness.NATS, pw map[string]string, actors, others []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := func(user string) jetstream.JetStream {
		t.Helper()
		j, err := jetstream.New(connectAs(t, n, user, pw[user]).nc)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	var watchers []*pause.Watcher
	for _, actor := range actors {
		w, err := pause.Follow(ctx, js(actor), 1, pause.WatcherConfig{Cluster: "prod", Actor: actor}, zerolog.Nop())
		if err != nil {
			t.Fatalf("%s creates and watches %s: %v", actor, pause.Bucket, err)
		}
		watchers = append(watchers, w)
	}
	open := func(user string) pause.Store {
		t.Helper()
		kv, err := js(user).KeyValue(ctx, pause.Bucket)
		if err != nil {
			t.Fatalf("%s opens %s: %v", user, pause.Bucket, err)
		}
		return pause.Store{KV: kv, Cluster: "prod"}
	}
	op := open("operator")
	if err := op.Pause(ctx, pause.All, pause.Record{Since: time.Now(), By: "e2e"}); err != nil {
		t.Fatalf("operator pauses: %v", err)
	}
	for _, w := range watchers {
		harness.Eventually(t, time.Second, "paused within 1 s", func() bool { _, ok := w.Paused(); return ok })
	}
	if r, ok, err := open("audit").Get(ctx, pause.All); err != nil || !ok || r.By != "e2e" {
		t.Fatalf("audit reads the record: %+v %v %v", r, ok, err)
	}
	for _, user := range others {
		if user == "watcher" {
			// Without STREAM.INFO on the bucket they cannot open it.
			short, stop := context.WithTimeout(ctx, 2*time.Second)
			_, err := js(user).KeyValue(short, pause.Bucket)
			stop()
			if err == nil {
				t.Errorf("%s opened %s", user, pause.Bucket)
			}
			continue
		}
		// A refused put is never acknowledged: each attempt waits 2 s.
		st := open(user)
		short, stop := context.WithTimeout(ctx, 2*time.Second)
		if err := st.Pause(short, "cordon", pause.Record{Since: time.Now()}); err == nil {
			t.Errorf("%s wrote a pause record", user)
		}
		stop()
		short, stop = context.WithTimeout(ctx, 2*time.Second)
		if err := st.Resume(short, pause.All); err == nil {
			t.Errorf("%s deleted a pause record", user)
		}
		stop()
	}
	if r, ok, err := op.Get(ctx, pause.All); err != nil || !ok || r.By != "e2e" {
		t.Fatalf("the record after the refused writes: %+v %v %v", r, ok, err)
	}
	if _, ok, err := op.Get(ctx, "cordon"); err != nil || ok {
		t.Fatalf("a refused write stored cordon's record: %v %v", ok, err)
	}
	if err := op.Resume(ctx, pause.All); err != nil {
		t.Fatalf("operator resumes: %v", err)
	}
	for _, w := range watchers {
		harness.Eventually(t, time.Second, "resumed within 1 s", func() bool { _, ok := w.Paused(); return !ok })
	}
}

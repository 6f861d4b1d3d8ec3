package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/test/harness"
)

// natsCLIBin is the nats CLI at the version hack/natscli/go.mod pins, built
// by make controlplane (hack/build-controlplane.sh) into the cache.
func natsCLIBin(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mod := mustRead(t, filepath.Join(root, "hack", "natscli", "go.mod"))
	m := regexp.MustCompile(`(?m)^require github\.com/nats-io/natscli (v\S+)$`).FindStringSubmatch(mod)
	if m == nil {
		t.Fatal("hack/natscli/go.mod does not require github.com/nats-io/natscli")
	}
	dir, err := harness.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "nats-"+m[1])
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run make controlplane (hack/build-controlplane.sh builds it)", bin)
	}
	return bin
}

// docNATSCommands are the lines of the docs' fenced sh blocks that run the
// nats CLI as one of the users for people: nats "${A[@]}" (audit) or
// nats "${O[@]}" (operator).
func docNATSCommands(t *testing.T, files ...string) map[string][]string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range files {
		in := false
		sc := bufio.NewScanner(strings.NewReader(mustRead(t, filepath.Join(root, f))))
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "```"):
				in = !in && (l == "```sh" || l == "```bash")
			case in && (strings.HasPrefix(l, `nats "${A[@]}" `) || strings.HasPrefix(l, `nats "${O[@]}" `)):
				out[f] = append(out[f], l)
			}
		}
	}
	return out
}

// TestDeployOperatorCommands is the first point of issue 38: every nats
// command the docs hand to on-call works with deploy/'s users, and only
// the intended user can run it. On a real nats-server with
// deploy/base/nats/auth.conf (streams made by the watcher's user, records
// published by the actors' users), every nats "${A[@]}" / "${O[@]}" line of
// README.md, docs/deploy.md, docs/notifier.md and docs/report.md runs as
// written with the nats CLI; the ctl requests reach stand-ins subscribed as
// the report and notifier users (their deploy permissions, allow_responses)
// and their answers come back. Then the audit user is refused the ctl
// requests, and neither audit nor operator may purge or delete a stream,
// create a consumer (nats stream view, nats sub --stream without --direct)
// or publish a data subject.
func TestDeployOperatorCommands(t *testing.T) {
	bin := natsCLIBin(t)
	n, pw := harness.StartDeployedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	watcher := connectAs(t, n, "watcher", pw["watcher"])
	wjs, err := jetstream.New(watcher.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsx.EnsureStreams(ctx, wjs, config.Default().NATS); err != nil {
		t.Fatalf("the watcher creates KUBE and OPS: %v", err)
	}
	publish := func(user, subj, id string) {
		t.Helper()
		u := connectAs(t, n, user, pw[user])
		js, err := jetstream.New(u.nc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, subj, []byte(`{"stored":"`+id+`"}`), jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("%s publishes %s: %v", user, subj, err)
		}
	}
	publish("watcher", "kube.prod.node.node-a", "kube-node-a")
	publish("cordon", "ops.prod.cordon.cordoned.node-a", "cordon/node-a/cordoned/1")
	publish("cordon", "ops.default.cordon.cordoned.node-a", "cordon/node-a/cordoned/2")
	publish("cleanup", "ops.prod.cleanup.deleted.payments.web-1", "cleanup/web-1/deleted")

	// Stand-ins for the services' ctl subscriptions, with their own users.
	var mu sync.Mutex
	got := map[string][]string{}
	respond := func(user, subj, answer string) {
		u := connectAs(t, n, user, pw[user])
		if _, err := u.nc.Subscribe(subj, func(m *nats.Msg) {
			mu.Lock()
			got[user] = append(got[user], m.Subject+" "+string(m.Data))
			mu.Unlock()
			_ = m.Respond([]byte(answer))
		}); err != nil {
			t.Fatal(err)
		}
		if err := u.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	respond("report", "ctl.*.report.run", `{"id":"report/restarts/run/test-1","offenders":0,"rows":0}`)
	respond("notifier", "ctl.*.notifier.replay", `[{"receiver":"ops-feishu","deadLetters":0}]`)

	home := t.TempDir()
	run := func(t *testing.T, line string, timeout time.Duration) (string, error) {
		t.Helper()
		script := `A=(--server '` + n.URL + `' --user audit --password '` + pw["audit"] + `' --inbox-prefix _INBOX_audit)
O=(--server '` + n.URL + `' --user operator --password '` + pw["operator"] + `' --inbox-prefix _INBOX_operator)
nats() { "$NATS_BIN" "$@"; }
` + line + "\n"
		cctx, ccancel := context.WithTimeout(ctx, timeout)
		defer ccancel()
		cmd := exec.CommandContext(cctx, "bash", "-c", script)
		cmd.Env = append(os.Environ(), "NATS_BIN="+bin, "HOME="+home, "XDG_CONFIG_HOME="+home, "NO_COLOR=1")
		cmd.WaitDelay = 2 * time.Second
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// What each documented command must print (beyond running without a
	// permission error): a stored record, an answer.
	expect := []struct{ part, want string }{
		{"stream subjects KUBE", "kube.prod.node.node-a"},
		{"sub --stream OPS --direct", "ops.prod.cordon.cordoned.node-a"},
		{"--last-for 'ops.prod.cordon.cordoned.node-a'", "cordon/node-a/cordoned/1"},
		{"--last-for 'ops.default.cordon.cordoned.node-a'", "cordon/node-a/cordoned/2"},
		{"stream get OPS 1", "ops.prod.cordon.cordoned.node-a"},
		{"stream info OPS", "ops.>"},
		{"req ctl.prod.report.run", "report/restarts/run/test-1"},
		{"req ctl.default.report.run", "report/restarts/run/test-1"},
		{"notifier.replay", `"receiver":"ops-feishu"`},
	}
	docs := docNATSCommands(t, "README.md", "docs/deploy.md", "docs/notifier.md", "docs/report.md")
	total := 0
	for _, f := range []string{"README.md", "docs/deploy.md", "docs/notifier.md", "docs/report.md"} {
		if len(docs[f]) == 0 {
			t.Errorf("%s has no nats \"${A[@]}\" / \"${O[@]}\" command", f)
		}
		for _, line := range docs[f] {
			total++
			cmdLine := strings.ReplaceAll(line, "<cluster>", "prod")
			t.Run(f+": "+line, func(t *testing.T) {
				// A subscription runs until it is stopped: it has 4 s.
				live := strings.Contains(cmdLine, " sub ")
				timeout := 20 * time.Second
				if live {
					timeout = 4 * time.Second
				}
				out, err := run(t, cmdLine, timeout)
				if strings.Contains(strings.ToLower(out), "permissions violation") || strings.Contains(out, "nats: error") {
					t.Fatalf("refused:\n%s", out)
				}
				if err != nil && !(live && ctx.Err() == nil) {
					t.Fatalf("%v:\n%s", err, out)
				}
				for _, e := range expect {
					if strings.Contains(cmdLine, e.part) && !strings.Contains(out, e.want) {
						t.Errorf("output lacks %q:\n%s", e.want, out)
					}
				}
				t.Logf("%s", out)
			})
		}
	}
	mu.Lock()
	if len(got["report"]) == 0 || len(got["notifier"]) == 0 {
		t.Errorf("the ctl requests reached report %d times and the notifier %d times, want both", len(got["report"]), len(got["notifier"]))
	}
	for _, r := range got["notifier"] {
		if !strings.HasPrefix(r, "ctl.prod.notifier.replay ") || !strings.Contains(r, `{"receiver":"ops-feishu"}`) {
			t.Errorf("the notifier received %q, want ctl.prod.notifier.replay {\"receiver\":\"ops-feishu\"}", r)
		}
	}
	before := len(got["report"]) + len(got["notifier"])
	mu.Unlock()
	t.Logf("%d documented commands run", total)

	// What the users for people may not do, through the same CLI.
	for _, line := range []string{
		`nats "${A[@]}" req ctl.prod.report.run ''`,
		`nats "${A[@]}" req ctl.prod.notifier.replay '{"receiver":"ops-feishu"}'`,
		`nats "${A[@]}" stream purge OPS -f`,
		`nats "${O[@]}" stream purge OPS -f`,
		`nats "${A[@]}" stream rm OPS -f`,
		`nats "${O[@]}" stream rm KUBE -f`,
		`nats "${A[@]}" stream rmm OPS 1 -f`,
		`nats "${O[@]}" pub ops.prod.cordon.cordoned.forged x`,
		`nats "${A[@]}" pub kube.prod.node.forged x`,
		`nats "${O[@]}" sub --stream OPS --since 2h 'ops.*.cordon.>'`,
		`nats "${A[@]}" sub --stream OPS --since 2h 'ops.*.cordon.>'`,
		`nats "${O[@]}" consumer add OPS mine --pull --deliver all --ack none --defaults`,
		`nats "${O[@]}" consumer rm OPS opswire-notifier-prod-ops-feishu -f`,
	} {
		t.Run("refused: "+line, func(t *testing.T) {
			// The CLI does not always exit non-zero (a refused req waits
			// out its timeout and exits 0): the server's verdict is what
			// counts, and the CLI prints it.
			out, _ := run(t, line, 8*time.Second)
			t.Logf("%s", out)
			if !strings.Contains(strings.ToLower(out), "permissions violation") {
				t.Errorf("no permissions violation reported")
			}
		})
	}
	// The refusals through nats.go, where the violation is reported to the
	// client (the CLI's pub does not wait for it).
	for _, tc := range []struct{ user, subject string }{
		{"audit", "ctl.prod.report.run"}, {"audit", "ctl.prod.notifier.replay"},
		{"operator", "ops.prod.cordon.cordoned.forged"}, {"operator", "kube.prod.node.forged"},
		{"operator", "dlq.prod.notifier.forged"}, {"operator", "notify.prod.feishu.delivered"},
		{"operator", "$JS.API.STREAM.PURGE.OPS"}, {"operator", "$JS.API.STREAM.DELETE.KUBE"},
		{"operator", "$JS.API.STREAM.MSG.DELETE.OPS"}, {"operator", "$JS.API.CONSUMER.CREATE.OPS"},
		{"operator", "$JS.API.CONSUMER.CREATE.OPS.opswire-notifier-prod-ops-feishu"},
		{"operator", "$JS.API.CONSUMER.MSG.NEXT.OPS.opswire-notifier-prod-ops-feishu"},
		{"operator", "$JS.API.CONSUMER.DELETE.OPS.opswire-notifier-prod-ops-feishu"},
		{"operator", "$JS.API.CONSUMER.NAMES.KUBE"}, {"operator", "$JS.API.CONSUMER.CREATE.KUBE.x.kube.>"},
		{"operator", "ctl.prod.pause"},
		// Pause records: only operator writes them (TestDeployPauseRecords).
		{"audit", "$KV.opswire-pause.prod.cordon"}, {"watcher", "$KV.opswire-pause.prod.cordon"},
		{"cordon", "$KV.opswire-pause.prod.cordon"}, {"cleanup", "$KV.opswire-pause.prod.all"},
		{"report", "$KV.opswire-pause.prod.report"}, {"notifier", "$KV.opswire-pause.prod.notifier"},
		{"audit", "$JS.API.STREAM.CREATE.KV_opswire-pause"}, {"operator", "$JS.API.STREAM.DELETE.KV_opswire-pause"},
		{"operator", "$JS.API.STREAM.PURGE.KV_opswire-pause"}, {"audit", "$JS.API.CONSUMER.CREATE.KV_opswire-pause.x.>"},
	} {
		t.Run(tc.user+" cannot publish "+tc.subject, func(t *testing.T) {
			u := connectAs(t, n, tc.user, pw[tc.user])
			if err := u.nc.PublishRequest(tc.subject, u.nc.NewInbox(), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if err := u.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			u.violation(t, tc.subject)
		})
	}
	for _, tc := range []struct{ user, subject string }{
		{"operator", "_INBOX.>"}, {"operator", "_INBOX_audit.>"}, {"audit", "_INBOX_operator.>"},
		{"operator", "ctl.>"}, {"operator", "$JS.EVENT.>"},
	} {
		t.Run(tc.user+" cannot subscribe "+tc.subject, func(t *testing.T) {
			u := connectAs(t, n, tc.user, pw[tc.user])
			if _, err := u.nc.SubscribeSync(tc.subject); err != nil {
				t.Fatal(err)
			}
			u.violation(t, tc.subject)
		})
	}
	mu.Lock()
	if after := len(got["report"]) + len(got["notifier"]); after != before {
		t.Errorf("the refused ctl requests reached the services: %d requests, want %d", after, before)
	}
	mu.Unlock()
	// Nothing was removed or added: both streams hold what was published,
	// and nobody made a consumer.
	for stream, want := range map[string]uint64{"KUBE": 1, "OPS": 3} {
		s, err := wjs.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("stream %s after the refusals: %v", stream, err)
		}
		if st := s.CachedInfo().State; st.Msgs != want || st.Consumers != 0 {
			t.Errorf("stream %s: %d messages and %d consumers, want %d and none", stream, st.Msgs, st.Consumers, want)
		}
	}
}

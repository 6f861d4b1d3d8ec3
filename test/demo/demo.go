// Package demo is `make demo`: opswire end to end on one machine, without a
// cluster. It starts a real kube-apiserver and etcd, an embedded nats-server
// with JetStream, the five service binaries, and a Feishu-compatible receiver
// that prints every card in the terminal; then it plays a scenario in which
// every situation opswire handles happens once: a node fills up and is
// cordoned, drains and is uncordoned, evicted pods are deleted, a pod stuck
// Terminating is force-deleted, restarting pods show up in a restart report,
// and a node's images grow past the alert threshold.
//
// It reuses the e2e harness (package harness) through Env, so the demo runs
// exactly the parts the tests prove.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// Options of one demo run.
type Options struct {
	// ExitWhenDone returns once every situation was shown, instead of
	// waiting for Ctrl-C.
	ExitWhenDone bool
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Pace is a pause between situations so a reader can follow (0: none).
	Pace time.Duration
	Out  io.Writer // the story, events and cards
	Log  io.Writer // diagnostics (service log tails on failure)
}

// Cluster is the <cluster> subject token of the demo.
const Cluster = "demo"

const (
	botToken  = "demo-bot"
	botSecret = "demo-signing-secret"
)

// Run plays the demo until ctx is cancelled (Ctrl-C) or, with ExitWhenDone,
// until every situation has been shown. Everything it started is stopped
// before it returns.
func Run(ctx context.Context, o Options) error {
	env, err := NewEnv(o.Log)
	if err != nil {
		return err
	}
	defer env.Close()
	d := &demo{env: env, out: o.Out, start: time.Now(), seen: map[string]bool{}}

	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	done := make(chan error, 1)
	go func() { done <- env.step(func() { d.play(o) }) }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-time.After(o.Timeout):
		return fmt.Errorf("the scenario did not finish within %v", o.Timeout)
	case <-ctx.Done():
		d.say("\nCtrl-C: stopping everything…")
		return nil
	}
	if o.ExitWhenDone {
		d.say("\nAll situations shown; stopping everything…")
		return nil
	}
	d.say("\nEverything keeps running: try `nats sub 'ops.>' -s %s` in another terminal. Press Ctrl-C to stop.", d.natsURL)
	<-ctx.Done()
	d.say("\nCtrl-C: stopping everything…")
	return nil
}

type demo struct {
	env     *Env
	out     io.Writer
	start   time.Time
	natsURL string

	mu    sync.Mutex
	seen  map[string]bool // "<kind>:<detail>" of OPS events and cards
	cards int
}

// say prints one line of the story with the time since the start.
func (d *demo) say(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for strings.HasPrefix(format, "\n") {
		fmt.Fprintln(d.out)
		format = format[1:]
	}
	if format == "" {
		return
	}
	fmt.Fprintf(d.out, "[%6.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) mark(key string) {
	d.mu.Lock()
	d.seen[key] = true
	d.mu.Unlock()
}

func (d *demo) has(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[key]
}

// waitFor polls until key was seen.
func (d *demo) waitFor(timeout time.Duration, what, key string) {
	harness.Eventually(d.env, timeout, what, func() bool { return d.has(key) })
}

func (d *demo) play(o Options) {
	d.say("Starting a local control plane: kube-apiserver + etcd (built once into ~/.cache/opswire/bin by `make controlplane`)…")
	cp := harness.StartControlPlane(d.env)
	d.say("kube-apiserver ready at %s", cp.URL)
	n := harness.StartNATS(d.env)
	d.natsURL = n.URL
	d.say("nats-server with JetStream ready at %s", n.URL)

	bot := feishutest.NewServer()
	d.env.Cleanup(bot.Close)
	bot.OnCard = func(_ string, c *feishutest.Card) { d.printCard(c) }
	botURL := bot.AddBot(botToken, feishutest.Bot{Secret: botSecret})
	d.say("Feishu-compatible receiver listening at %s (cards are printed below as they arrive)", bot.URL)

	sub, err := n.Conn.Subscribe("ops.>", d.printOps)
	if err != nil {
		d.env.Fatalf("subscribe ops.>: %v", err)
	}
	d.env.Cleanup(func() { _ = sub.Unsubscribe() })

	harness.CreateNamespace(d.env, cp.Client, "opswire") // the Leases live here
	cfg := harness.WriteConfig(d.env, configYAML)
	services := []string{"watcher", "cordon", "cleanup", "report", "notifier"}
	d.say("Building the five services (a few minutes on a fresh clone, seconds afterwards)…")
	for _, svc := range services {
		start := time.Now()
		harness.Build(d.env, svc)
		d.say("  opswire-%s built (%v)", svc, time.Since(start).Round(100*time.Millisecond))
	}
	d.say("Starting the five services…")
	procs := map[string]*harness.Process{}
	for _, svc := range services {
		opts := harness.ServiceOptions{Config: cfg, NATSURL: n.URL, Kubeconfig: cp.Kubeconfig}
		if svc == "notifier" {
			opts.Kubeconfig = ""
			opts.Env = []string{"OPSWIRE_FEISHU_URL=" + botURL, "OPSWIRE_FEISHU_SECRET=" + botSecret}
		}
		procs[svc] = harness.StartService(d.env, svc, opts)
	}
	for svc, p := range procs {
		p.WaitReady(d.env, 90*time.Second)
		d.say("  opswire-%s ready (health, readiness and metrics on %s)", svc, p.HealthURL)
	}
	s := &scenario{d: d, cp: cp, nc: n.Conn, pace: o.Pace}
	s.run()
	d.say("Done: %d cards delivered to Feishu; every OPS event is in the stream OPS (7-day audit log).", d.cardCount())
}

func (d *demo) cardCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cards
}

// printOps prints one OPS event as a line and remembers it.
func (d *demo) printOps(m *nats.Msg) {
	parts := strings.Split(m.Subject, ".") // ops.<cluster>.<actor>.<verb|kind>...
	if len(parts) < 4 {
		return
	}
	switch parts[2] {
	case "cordon":
		var e events.CordonDecision
		if json.Unmarshal(m.Data, &e) == nil {
			d.say("  OPS %-28s node %s: %s", "cordon."+e.Verb, e.Node, e.Reason)
			d.mark("cordon:" + e.Verb + ":" + e.Node)
		}
	case "cleanup":
		var e events.CleanupDecision
		if json.Unmarshal(m.Data, &e) == nil {
			d.say("  OPS %-28s pod %s/%s: %s", "cleanup."+e.Verb, e.Namespace, e.Pod, e.Message)
			d.mark("cleanup:" + e.Verb + ":" + e.Namespace + "/" + e.Pod)
		}
	case "report":
		if parts[3] == "restarts" {
			var e events.RestartReport
			if json.Unmarshal(m.Data, &e) == nil {
				d.say("  OPS %-28s %d pods over %d restarts (%d pods seen)", "report.restarts", e.Offenders, e.Threshold, e.PodsSeen)
				d.mark("report:restarts")
			}
		} else {
			var e events.ImageAlert
			if json.Unmarshal(m.Data, &e) == nil {
				d.say("  OPS %-28s node %s: images take %.1f GiB (%s)", "report.images", e.Node, float64(e.ImageBytes)/(1<<30), e.Reason)
				d.mark("report:images:" + e.Node)
			}
		}
	}
}

// printCard prints a Feishu card in a box.
func (d *demo) printCard(c *feishutest.Card) {
	d.mu.Lock()
	d.cards++
	text := c.Text()
	for _, k := range []string{"node-a", "evicted-", "stuck-1", "api-1", "node-d"} {
		if strings.Contains(text, k) {
			d.seen["card:"+k] = true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  ┌─ Feishu card #%d %s\n", d.cards, strings.Repeat("─", 50))
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(&b, "  │ %s\n", line)
	}
	fmt.Fprintf(&b, "  └%s\n", strings.Repeat("─", 67))
	fmt.Fprint(d.out, b.String())
	d.mu.Unlock()
}

// configYAML is the demo's configuration: the seed's sections with short
// intervals and small thresholds so every situation happens within a minute.
var configYAML = `cluster:
  name: ` + Cluster + `
controller:
  leaseLockName: opswire
  leaseLockNamespace: opswire
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
autoCordon:
  interval: 5s
  maxPods: 6
  minPods: 3
  maxCordonedPercent: 50   # 4 nodes: at most 2 cordoned
delException:
  interval: 5s
  terminatingTimeout: 3s
  msgtitle: "Deleted abnormal pods"
sendReport:
  total: 5
  msgtitle: "Pods restarting too often"
imageAlert:
  maxBytes: 10737418240    # 10 GiB
  maxPercent: 0
  cooldown: 1m
notifier:
  receivers:
  - name: demo-feishu
    urlEnv: OPSWIRE_FEISHU_URL
    secretEnv: OPSWIRE_FEISHU_SECRET
  defaultReceivers: [demo-feishu]
  groupWait: 1s
  groupInterval: 3s
`

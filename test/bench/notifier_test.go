//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

const (
	// burstGroupWait is burstConfig's groupWait.
	burstGroupWait = time.Second
	burstSize      = 10_000
	burstToken     = "bench-bot-token"
	burstCluster   = "bench"
)

// burstConfig groups quickly (1 s wait, 2 s interval) so the figure shows
// the notifier's work rather than its configured waiting; rate limits are
// Feishu's (5/s, 100/min per bot), the defaults.
const burstConfig = `
cluster:
  name: bench
notifier:
  groupWait: 1s
  groupInterval: 2s
  receivers:
  - name: ops-feishu
    urlEnv: BENCH_FEISHU_URL
    secretEnv: BENCH_FEISHU_SECRET
  routes:
  - subjects: ['ops.*.cleanup.>']
    receivers: [ops-feishu]
`

// BenchmarkNotifierBurst10k is figure 6: 10,000 cleanup results published
// at once to OPS, the notifier process delivering them as signed cards to the
// Feishu-compatible test server. It measures the time from the first publish
// until every event is accounted for in accepted cards and acknowledged, the
// cards sent, rate-limit violations and the process's peak resident memory.
// Floor: a bare durable pull consumer on the same burst, fetching and acking
// every message, running at the same time.
func BenchmarkNotifierBurst10k(b *testing.B) {
	harness.Build(b, "notifier")
	n := harness.StartNATS(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := natsx.EnsureStreams(ctx, n.JS, config.Default().NATS); err != nil {
		b.Fatal(err)
	}
	feishu := feishutest.NewServer()
	b.Cleanup(feishu.Close)
	secret := "bench-secret-3e1a"
	url := feishu.AddBot(burstToken, feishutest.Bot{Secret: secret})
	p := harness.StartService(b, "notifier", harness.ServiceOptions{Config: harness.WriteConfig(b, burstConfig), NATSURL: n.URL,
		Args: []string{"--pprof"}, Env: []string{"BENCH_FEISHU_URL=" + url, "BENCH_FEISHU_SECRET=" + secret}})
	p.WaitReady(b, time.Minute)

	floorFirst, floorDone := startBareConsumer(b, ctx, n.JS)
	msgs := cleanupResults(b)
	js, err := jetstream.New(n.Conn, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	profiled := fetchCPUProfile(b, http.DefaultClient, p.HealthURL, 3*time.Second, os.Getenv("OPSWIRE_BENCH_NOTIFIER_CPUPROFILE"))
	b.ResetTimer()
	start := time.Now()
	for _, m := range msgs {
		if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	published := time.Since(start)
	var accounted, held time.Duration
	// Polled every 5 ms. The notifier's metrics are scraped (which costs it
	// CPU) only until it has taken the burst in.
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		// The timeline of the run: when the notifier had taken in (and
		// looked up) every message.
		if held == 0 && p.Metric(`opswire_notifier_messages_total{consumer="ops-feishu",result="routed"}`) >= burstSize {
			held = time.Since(start)
		}
		if harness.CardResults(b, feishu.Cards(burstToken)) >= burstSize && settled(ctx, n.JS) {
			accounted = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("timed out waiting for every event in an accepted card, and acknowledged")
		}
	}
	b.StopTimer()
	// The process's high-water mark (VmHWM): the most it ever held.
	peakRSS := procStatus(b, p.Pid())["VmHWM"] * 1024
	<-profiled
	var floor, floorStart time.Duration
	select {
	case d := <-floorDone:
		floor, floorStart = d.Sub(start), (<-floorFirst).Sub(start)
	case <-time.After(time.Minute):
		b.Fatal("the bare consumer did not ack the burst")
	}
	cards := feishu.Cards(burstToken)
	if got := harness.CardResults(b, cards); got != burstSize {
		b.Fatalf("cards account for %d events, want exactly %d", got, burstSize)
	}
	b.ReportMetric(accounted.Seconds(), "accounted-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	// No card can leave before groupWait (1 s) from the first event, and no
	// notifier acks the burst sooner than a bare consumer that does nothing
	// else: the least any notifier with this configuration needs is the
	// larger of the two (docs/benchmarks-method.md#6-notifier).
	b.ReportMetric(max(burstGroupWait.Seconds(), floor.Seconds()), "wait-floor-s")
	// The time beyond groupWait is the notifier's own work (taking the
	// burst in past the wait, sending, recording and acking), compared with
	// the bare consumer's reading and acking of the same burst.
	b.ReportMetric(max(0, accounted.Seconds()-burstGroupWait.Seconds()), "beyond-wait-s")
	b.ReportMetric(float64(len(cards)), "cards")
	b.ReportMetric(float64(len(feishu.Requests())), "requests")
	b.ReportMetric(float64(feishu.RateViolations()), "rate-violations")
	b.ReportMetric(peakRSS/(1<<20), "peak-rss-MiB")
	b.Logf("burst published in %v; %d cards, %d requests, all accounted for after %v (bare consumer: first message acked after %v, the last after %v)",
		published.Round(time.Millisecond), len(cards), len(feishu.Requests()), accounted.Round(time.Millisecond), floorStart.Round(time.Millisecond), floor.Round(time.Millisecond))
	var firstCard, lastCard time.Duration
	for i, r := range feishu.Requests() {
		if d := r.Time.Sub(start); i == 0 || d < firstCard {
			firstCard = d
		}
		if d := r.Time.Sub(start); d > lastCard {
			lastCard = d
		}
	}
	b.Logf("notifier timeline from the first publish: every message taken in (routed, delivered-records looked up) after %v (polled every 5 ms), "+
		"first card sent at %v, last at %v (groupWait 1s), every message acknowledged after %v",
		held.Round(time.Millisecond), firstCard.Round(time.Millisecond), lastCard.Round(time.Millisecond), accounted.Round(time.Millisecond))
	// The notifier logs a card's delivery just after its last ack: the
	// burst can show as settled a moment before the line is written.
	var data []byte
	harness.Eventually(b, 10*time.Second, "the notifier's delivery log lines", func() bool {
		data, _ = os.ReadFile(p.LogPath)
		return strings.Count(string(data), `"recordMs"`) >= len(cards)
	})
	for _, line := range strings.Split(string(data), "\n") {
		var l struct {
			Events, AckedWithRecords  int
			RecordMs, AckMs, RenderMs float64
			Time, Opened              time.Time
			Message                   string
		}
		if json.Unmarshal([]byte(line), &l) != nil {
			continue
		}
		switch {
		case l.Message == "group flushed":
			b.Logf("notifier group of %d events: opened at %v (its first message looked up), rendered in %.0f ms, handed to the sender at %v",
				l.Events, l.Opened.Sub(start).Round(time.Millisecond), l.RenderMs, l.Time.Sub(start).Round(time.Millisecond))
		case strings.Contains(line, `"recordMs"`):
			b.Logf("notifier after an accepted card of %d events: delivered records written in %.0f ms, %d messages acked as their records were stored, the other %d in %.0f ms more, done at %v",
				l.Events, l.RecordMs, l.AckedWithRecords, l.Events-l.AckedWithRecords, l.AckMs, l.Time.Sub(start).Round(time.Millisecond))
		}
	}
}

// fetchCPUProfile starts a CPU profile of d of a Go process serving
// net/http/pprof at base (the notifier's health port; the API server's
// /debug/pprof, with its client) when path is set; the channel closes once
// it is written.
func fetchCPUProfile(b *testing.B, client *http.Client, base string, d time.Duration, path string) <-chan struct{} {
	b.Helper()
	done := make(chan struct{})
	if path == "" {
		close(done)
		return done
	}
	started := make(chan struct{})
	go func() {
		defer close(done)
		close(started)
		resp, err := client.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(d.Seconds())))
		if err != nil {
			b.Errorf("CPU profile of %s: %v", base, err)
			return
		}
		defer resp.Body.Close()
		prof, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Errorf("CPU profile of %s: %d %v", base, resp.StatusCode, err)
			return
		}
		if err := os.WriteFile(path, prof, 0o644); err != nil {
			b.Error(err)
		}
	}()
	<-started
	time.Sleep(50 * time.Millisecond) // the request reaches the process and the profile starts
	return done
}

// cleanupResults builds the burst: cleanup results as opswire-cleanup publishes them.
func cleanupResults(b *testing.B) []*nats.Msg {
	b.Helper()
	reasons := []string{"Evicted", "Evicted", "Evicted", "NodeLost", "OOMKilled"}
	now := time.Now().UTC()
	out := make([]*nats.Msg, burstSize)
	for i := range out {
		ns, pod := fmt.Sprintf("team-%d", i%8), fmt.Sprintf("web-%05d", i)
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		d := events.CleanupDecision{Verb: "deleted", Action: "delete", Namespace: ns, Pod: pod, PodUID: uid,
			Node: fmt.Sprintf("node-%d", i%50), Phase: "Failed", PodReason: reasons[i%len(reasons)],
			Reason: "FailedPod", AgeSeconds: 120, Severity: events.SeverityWarning, Time: now}
		ev, err := envelope.New("cleanup/"+uid+"/deleted", envelope.Source(burstCluster, "cleanup"), events.TypeCleanup, ns+"/"+pod, d, now)
		if err != nil {
			b.Fatal(err)
		}
		out[i] = ev.Msg(subject.Ops(burstCluster, "cleanup", "deleted", ns, pod))
	}
	return out
}

// startBareConsumer runs the floor: a durable pull consumer that acks every
// burst message; it sends the times the first and the last one were acked.
func startBareConsumer(b *testing.B, ctx context.Context, js jetstream.JetStream) (first, last <-chan time.Time) {
	b.Helper()
	cons, err := js.CreateOrUpdateConsumer(ctx, "OPS", jetstream.ConsumerConfig{
		Durable: "bench-floor", FilterSubject: "ops." + burstCluster + ".cleanup.>", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000,
	})
	if err != nil {
		b.Fatal(err)
	}
	done, firstDone := make(chan time.Time, 1), make(chan time.Time, 1)
	var acked atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if err := m.Ack(); err == nil {
			switch acked.Add(1) {
			case 1:
				firstDone <- time.Now()
			case burstSize:
				done <- time.Now()
			}
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Stop)
	return firstDone, done
}

// settled is true when the notifier's consumer has nothing pending or unacked.
func settled(ctx context.Context, js jetstream.JetStream) bool {
	c, err := js.Consumer(ctx, "OPS", "opswire-notifier-"+burstCluster+"-ops-feishu")
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

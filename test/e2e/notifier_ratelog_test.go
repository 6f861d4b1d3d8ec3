package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

// rateLogSubjects is where the notifier's rate-log puts go: the rate log
// lives in the delivered-id bucket (dispatch.DeliveredBucket) under
// "=rate.<budget>" (dispatch.KVRateLog).
const rateLogSubjects = "$KV.opswire-notifier-delivered.=rate."

// TestNotifierRateLimitHoldsWhileTheRateLogIsSlow (issue 37, item 2): the
// notifier saves its rate log (a KV put) for every card it sends. With
// that put slow now and then, as on a degraded bucket, a burst of cards
// still reaches Feishu at no more than 5 per second, each card once.
//
// The real notifier reaches NATS through a proxy that holds every sixth
// rate-log put for a second (and, in order, whatever the notifier sends
// behind it). A put slow every time would shift every send by the same
// second and prove nothing; one slow put among quick ones is what breaks a
// notifier that saves between the limiter's slot and the send: that send
// goes out a second after its slot, and the five slots the limiter then
// grants at once land within the same second of Feishu's count (9499).
func TestNotifierRateLimitHoldsWhileTheRateLogIsSlow(t *testing.T) {
	const (
		cards = 40 // one route, and so one card, per namespace: 8 s of cards at 5/s
		token = "e2e-bot-token-3c8e"
		slow  = time.Second
	)
	n := harness.StartNATS(t)
	var mu sync.Mutex
	puts := 0
	proxy := harness.StartNATSDelay(t, n.URL, slow, func(subj string) bool {
		if !strings.HasPrefix(subj, rateLogSubjects) {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		puts++
		return puts%6 == 1
	})
	feishu := feishutest.NewServer()
	t.Cleanup(feishu.Close)
	botURL := feishu.AddBot(token, feishutest.Bot{Secret: "bot-secret-6a1e"})

	var routes strings.Builder
	for i := range cards {
		fmt.Fprintf(&routes, "  - name: ns%02d\n    subjects: ['ops.*.cleanup.*.team-%02d.>']\n    receivers: [ops-feishu]\n", i, i)
	}
	cfg := harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: %s
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 10s
  retryInitial: 200ms
  retryMax: 2s
  giveUpAfter: 10m
  receivers:
  - name: ops-feishu
    urlEnv: E2E_FEISHU_URL
    secretEnv: E2E_FEISHU_SECRET
  routes:
%s`, notifierCluster, routes.String()))
	p := harness.StartService(t, "notifier", harness.ServiceOptions{Config: cfg, NATSURL: proxy.URL, ID: "notifier-a",
		Env: []string{"E2E_FEISHU_URL=" + botURL, "E2E_FEISHU_SECRET=bot-secret-6a1e"}})
	p.WaitReady(t, 30*time.Second)

	// The burst: one cleanup result per namespace, all at once.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods := make([]string, cards)
	for i := range cards {
		ns, pod := fmt.Sprintf("team-%02d", i), fmt.Sprintf("web-%05d", i)
		pods[i] = pod
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", 7000+i)
		d := events.CleanupDecision{Verb: "deleted", Action: "delete", Namespace: ns, Pod: pod, PodUID: uid,
			Node: "node-1", Phase: "Failed", PodReason: "Evicted", Reason: "failed pod older than minAge", AgeSeconds: 120,
			Severity: events.SeverityWarning, Time: time.Now().UTC()}
		ev, err := envelope.New("cleanup/"+uid+"/deleted/"+strconv.Itoa(1000+i), envelope.Source(notifierCluster, "cleanup"),
			events.TypeCleanup, ns+"/"+pod, d, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.JS.PublishMsg(ctx, ev.Msg(subject.Ops(notifierCluster, "cleanup", "deleted", ns, pod))); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}

	harness.Eventually(t, 90*time.Second, fmt.Sprintf("%d cards", cards), func() bool {
		return len(feishu.Cards(token)) >= cards
	})
	waitSettled(t, n.JS, 30*time.Second)

	// At the source: what Feishu answered, and what it accepted.
	reqs := feishu.Requests()
	answers := map[int]int{}
	for _, r := range reqs {
		answers[r.Code]++
	}
	mu.Lock()
	t.Logf("%d requests to Feishu, answers by code %v; %d rate-log puts, %d held for %v", len(reqs), answers, puts, proxy.Delayed(), slow)
	mu.Unlock()
	if v := feishu.RateViolations(); v != 0 || answers[feishutest.CodeBadRequest] != 0 {
		t.Errorf("Feishu refused %d requests for the rate (%d answers 9499): the limit was breached", v, answers[feishutest.CodeBadRequest])
		for i, r := range reqs {
			if r.Code != feishutest.CodeOK {
				t.Logf("request %d at %s answered %d %q; the 5 before it at %s", i, r.Time.Format("15:04:05.000"), r.Code, r.Msg, arrivals(reqs[max(0, i-5):i]))
			}
		}
	}
	if proxy.Delayed() < 3 {
		t.Errorf("only %d rate-log puts were held: the test did not make the rate log slow", proxy.Delayed())
	}
	// Every card once: one per namespace, naming its pod.
	seen := map[string]int{}
	for _, c := range feishu.Cards(token) {
		text := c.Text()
		found := 0
		for _, pod := range pods {
			if strings.Contains(text, pod) {
				seen[pod]++
				found++
			}
		}
		if found != 1 {
			t.Errorf("a card names %d of the burst's pods, want 1:\n%s", found, text)
		}
	}
	for _, pod := range pods {
		if seen[pod] != 1 {
			t.Errorf("pod %s is on %d cards, want exactly 1", pod, seen[pod])
		}
	}
	if got := harness.CardResults(t, feishu.Cards(token)); got != cards {
		t.Errorf("cards account for %d results, want %d", got, cards)
	}
}

// arrivals formats request times for a failure message.
func arrivals(rs []feishutest.Request) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Time.Format("05.000")
	}
	return strings.Join(out, " ")
}

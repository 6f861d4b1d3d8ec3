package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/test/harness"
)

const notifierCluster = "e2e"

// webhookRecorder is a generic-webhook receiver that records every event id.
type webhookRecorder struct {
	*httptest.Server
	mu  sync.Mutex
	ids map[string]int
	n   int
}

func newWebhookRecorder(t *testing.T) *webhookRecorder {
	w := &webhookRecorder{ids: map[string]int{}}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var p struct {
			Version string `json:"version"`
			Count   int    `json:"count"`
			Events  []struct {
				ID string `json:"id"`
			} `json:"events"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &p); err != nil || p.Version != "1" || p.Count != len(p.Events) {
			http.Error(rw, "bad payload", http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.n++
		for _, e := range p.Events {
			w.ids[e.ID]++
		}
		w.mu.Unlock()
	}))
	t.Cleanup(w.Close)
	return w
}

// counts returns distinct ids, and ids received more than once.
func (w *webhookRecorder) counts() (distinct, dup int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.ids {
		if n > 1 {
			dup++
		}
	}
	return len(w.ids), dup
}

// notifierSetup is one notifier under test with its receivers.
type notifierSetup struct {
	n       *harness.NATS
	feishu  *feishutest.Server
	hook    *webhookRecorder
	botURL  string
	hookURL string
	secret  string
	cfg     string
	env     []string
}

// newNotifierSetup prepares NATS, a signed Feishu bot (secret from the
// environment), a generic webhook (URL from a file) and the configuration.
func newNotifierSetup(t *testing.T, botSecret, notifierSecret, extra string) *notifierSetup {
	s := &notifierSetup{n: harness.StartNATS(t), feishu: feishutest.NewServer(), hook: newWebhookRecorder(t)}
	t.Cleanup(s.feishu.Close)
	s.secret = notifierSecret
	s.botURL = s.feishu.AddBot("e2e-bot-token-5f1d", feishutest.Bot{Secret: botSecret})
	s.hookURL = s.hook.URL + "/hooks/e2e-hook-token-77aa"
	urlFile := filepath.Join(t.TempDir(), "hook-url")
	if err := os.WriteFile(urlFile, []byte(s.hookURL+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.env = []string{"E2E_FEISHU_URL=" + s.botURL, "E2E_FEISHU_SECRET=" + notifierSecret}
	s.cfg = harness.WriteConfig(t, fmt.Sprintf(`cluster:
  name: %s
notifier:
  groupWait: 300ms
  groupInterval: 1s
  ackWait: 2s
  retryInitial: 200ms
  retryMax: 2s
  giveUpAfter: 10m
  receivers:
  - name: ops-feishu
    urlEnv: E2E_FEISHU_URL
    secretEnv: E2E_FEISHU_SECRET
  - name: audit
    type: webhook
    urlFile: %s
  routes:
  - subjects: ['ops.*.cleanup.>']
    receivers: [ops-feishu, audit]
%s`, notifierCluster, urlFile, extra))
	return s
}

func (s *notifierSetup) start(t *testing.T) *harness.Process {
	p := harness.StartService(t, "notifier", harness.ServiceOptions{Config: s.cfg, NATSURL: s.n.URL, ID: "notifier-a", Env: s.env})
	p.WaitReady(t, 30*time.Second)
	return p
}

// publishCleanups publishes n realistic cleanup results, ids from..from+n-1.
func publishCleanups(t *testing.T, js jetstream.JetStream, from, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reasons := []string{"Evicted", "Evicted", "Evicted", "NodeLost", "OOMKilled"}
	for i := from; i < from+n; i++ {
		ns := fmt.Sprintf("team-%d", i%4)
		pod := fmt.Sprintf("web-%05d", i)
		uid := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
		verb := "deleted"
		if i%50 == 49 {
			verb = "forcedeleted"
		}
		d := events.CleanupDecision{Verb: verb, Action: "delete", Namespace: ns, Pod: pod, PodUID: uid,
			Node: fmt.Sprintf("node-%d", i%10), Phase: "Failed", PodReason: reasons[i%len(reasons)],
			Reason: "failed pod older than minAge", AgeSeconds: 120, Severity: events.SeverityWarning, Time: time.Now().UTC()}
		id := "cleanup/" + uid + "/" + verb + "/" + strconv.Itoa(1000+i)
		ev, err := envelope.New(id, envelope.Source(notifierCluster, "cleanup"), events.TypeCleanup, ns+"/"+pod, d, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, ev.Msg(subject.Ops(notifierCluster, "cleanup", verb, ns, pod))); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

// waitSettled waits until every notifier consumer (one per receiver) has
// nothing pending or unacked.
func waitSettled(t *testing.T, js jetstream.JetStream, timeout time.Duration) {
	harness.Eventually(t, timeout, "notifier consumers to ack everything", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "OPS")
		if err != nil {
			return false
		}
		names := st.ConsumerNames(ctx)
		n := 0
		for name := range names.Name() {
			if !strings.HasPrefix(name, "opswire-notifier-"+notifierCluster+"-") {
				continue
			}
			c, err := js.Consumer(ctx, "OPS", name)
			if err != nil {
				return false
			}
			info, err := c.Info(ctx)
			if err != nil || info.NumPending != 0 || info.NumAckPending != 0 {
				return false
			}
			n++
		}
		return names.Err() == nil && n > 0
	})
}

// assertNoSecrets fails if a log contains a webhook URL, token or secret.
func assertNoSecrets(t *testing.T, logs string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(logs, s) {
			t.Errorf("log contains the secret or URL %q", s)
		}
	}
}

func readAll(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

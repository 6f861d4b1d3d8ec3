package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/feishutest"
	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// syncBuffer is the service's stderr (its logs), written from goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunWiresTheNotifier runs the whole service in-process through the CLI
// contract: the seed's delException.apiurl becomes a Feishu receiver whose
// cards carry msgtitle, a configured webhook (URL from the environment)
// gets the same event, the DLQ stream, the delivered-id bucket and the
// durable consumer are created, the message is acked, metrics are served,
// and cancellation ends the service with exit code 0 without any URL in
// its logs.
func TestRunWiresTheNotifier(t *testing.T) {
	ns := natstest.Start(t)
	bot := feishutest.NewServer()
	t.Cleanup(bot.Close)
	botURL := bot.AddBot("unit-bot-token-31ae", feishutest.Bot{})
	var (
		mu    sync.Mutex
		posts []webhook.Payload
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p webhook.Payload
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		posts = append(posts, p)
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	hookURL := hook.URL + "/hooks/unit-hook-token-77c1"
	t.Setenv("UNIT_NOTIFIER_HOOK", hookURL)

	cfg := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`cluster:
  name: unit-test
delException:
  apiurl: %s
  msgtitle: 删除异常 Pod
notifier:
  groupWait: 20ms
  groupInterval: 50ms
  ackWait: 2s
  receivers:
  - name: audit
    type: webhook
    urlEnv: UNIT_NOTIFIER_HOOK
  routes:
  - subjects: ['ops.*.cleanup.>']
    receivers: [audit]
`, botURL)), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rts := make(chan *app.Runtime, 1)
	stderr := &syncBuffer{}
	exit := make(chan int, 1)
	go func() {
		exit <- app.Run(app.Spec{Service: "notifier", NoKube: true},
			[]string{"--config", cfg, "--nats-url", ns.ClientURL(), "--listen", "127.0.0.1:0"},
			func(string) string { return "" }, io.Discard, stderr,
			func(sctx context.Context, rt *app.Runtime) error {
				rts <- rt
				rctx, stop := context.WithCancel(sctx)
				go func() { <-ctx.Done(); stop() }()
				return Run(rctx, rt)
			})
	}()
	var rt *app.Runtime
	select {
	case rt = <-rts:
	case code := <-exit:
		t.Fatalf("exited %d before running:\n%s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("service did not start")
	}

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var cons jetstream.Consumer
	testkit.Eventually(t, 10*time.Second, "the durable consumer", func() bool {
		cons, err = js.Consumer(context.Background(), subject.OpsStream, "opswire-notifier-unit-test-audit")
		return err == nil
	})
	if _, err := js.Stream(context.Background(), dispatch.DeadLetterStream); err != nil {
		t.Errorf("DLQ stream: %v", err)
	}
	kv, err := js.KeyValue(context.Background(), dispatch.DeliveredBucket)
	if err != nil {
		t.Fatalf("delivered bucket: %v", err)
	}

	id := "cleanup/uid-1/deleted"
	ev, err := envelope.New(id, envelope.Source("unit-test", "cleanup"), events.TypeCleanup, "shop/web-0",
		events.CleanupDecision{Verb: "deleted", Namespace: "shop", Pod: "web-0", PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), ev.Msg(subject.Ops("unit-test", "cleanup", "deleted", "shop", "web-0"))); err != nil {
		t.Fatal(err)
	}

	testkit.Eventually(t, 10*time.Second, "the card and the webhook post", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(bot.Cards("unit-bot-token-31ae")) == 1 && len(posts) == 1
	})
	testkit.Eventually(t, 10*time.Second, "the message acked", func() bool {
		ci, err := cons.Info(context.Background())
		return err == nil && ci.NumAckPending == 0 && ci.AckFloor.Stream == 1
	})
	card := bot.Cards("unit-bot-token-31ae")[0]
	if card.Title() != "删除异常 Pod" || card.Header.Template != "orange" || !strings.Contains(card.Text(), "shop/web-0") {
		t.Errorf("card:\n%s", card.Text())
	}
	mu.Lock()
	if p := posts[0]; p.Receiver != "audit" || p.Count != 1 || p.Events[0].ID != id || p.Cluster != "unit-test" {
		t.Errorf("webhook payload %+v", p)
	}
	mu.Unlock()
	keys, err := kv.ListKeys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for k := range keys.Keys() {
		if !strings.HasPrefix(k, "=") { // the rate logs of the two budgets, the accounted OPS sequences
			recorded = append(recorded, k)
		}
	}
	if len(recorded) != 2 {
		t.Errorf("delivered records %v, want one per receiver", recorded)
	}

	resp, err := http.Get("http://" + rt.Server.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`opswire_notifier_messages_total{consumer="audit",result="routed"} 1`,
		`opswire_notifier_messages_total{consumer="delException",result="routed"} 1`,
		`opswire_notifier_active 1`,
		`opswire_notifier_events_total{outcome="delivered",receiver="delException"} 1`,
		`opswire_notifier_events_total{outcome="delivered",receiver="audit"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	cancel()
	select {
	case code := <-exit:
		if code != app.ExitOK {
			t.Errorf("exit code %d, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("service did not stop")
	}
	logs := stderr.String()
	for _, secret := range []string{"unit-bot-token-31ae", "unit-hook-token-77c1", botURL, hookURL} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
	if !strings.Contains(logs, "notifier running") {
		t.Errorf("logs lack the start line:\n%s", logs)
	}
}

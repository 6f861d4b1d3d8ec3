package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/subject"
	"github.com/opswire/opswire/shared/testkit"
)

// TestRunWaitsForReplayOnShutdown: the service stops (SIGTERM) while a
// replayed card is at the bot. Run returns only after that request answered,
// the card was recorded and its dead letter removed, and the replay request
// got its answer, so the process does not exit mid-replay and leave a
// delivered card in the DLQ for the next replay to send again. The bot holds
// its answer until Run returned, or for 2 s: without the wait Run returns
// first and the dead letter is still there.
func TestRunWaitsForReplayOnShutdown(t *testing.T) {
	ns := natstest.Start(t)
	var accept atomic.Bool
	arrived := make(chan struct{}, 1)
	exited := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if !accept.Load() {
			w.WriteHeader(http.StatusBadRequest) // permanent: dead-lettered
			return
		}
		arrived <- struct{}{}
		select {
		case <-exited:
		case <-time.After(2 * time.Second):
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)
	t.Setenv("UNIT_NOTIFIER_HOOK", hook.URL)
	cfg := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(cfg, []byte(`cluster:
  name: unit-test
notifier:
  groupWait: 20ms
  groupInterval: 50ms
  ackWait: 6s
  requestTimeout: 3s
  receivers:
  - name: hook
    type: webhook
    urlEnv: UNIT_NOTIFIER_HOOK
  routes:
  - receivers: [hook]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncBuffer{}
	exit := make(chan int, 1)
	go func() {
		defer close(exited)
		exit <- app.Run(app.Spec{Service: "notifier", NoKube: true},
			[]string{"--config", cfg, "--nats-url", ns.ClientURL(), "--listen", "127.0.0.1:0"},
			func(string) string { return "" }, io.Discard, stderr,
			func(sctx context.Context, rt *app.Runtime) error {
				rctx, stop := context.WithCancel(sctx)
				go func() { <-ctx.Done(); stop() }()
				return Run(rctx, rt)
			})
	}()
	testkit.Eventually(t, 10*time.Second, "the notifier running", func() bool { return strings.Contains(stderr.String(), "notifier running") })

	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := envelope.New("cleanup/uid-1/deleted", envelope.Source("unit-test", "cleanup"), events.TypeCleanup, "shop/web-0",
		events.CleanupDecision{Verb: "deleted", Namespace: "shop", Pod: "web-0", PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), ev.Msg(subject.Ops("unit-test", "cleanup", "deleted", "shop", "web-0"))); err != nil {
		t.Fatal(err)
	}
	deadLetters := func() uint64 {
		st, err := js.Stream(context.Background(), dispatch.DeadLetterStream)
		if err != nil {
			t.Fatalf("DLQ stream: %v", err)
		}
		info, err := st.Info(context.Background())
		if err != nil {
			t.Fatalf("DLQ stream: %v", err)
		}
		return info.State.Msgs
	}
	testkit.Eventually(t, 10*time.Second, "the dead letter", func() bool { return deadLetters() == 1 })
	accept.Store(true) // the cause is fixed

	answer := make(chan *nats.Msg, 1)
	go func() {
		m, err := nc.Request(ReplaySubject("unit-test"), []byte(`{"receiver":"hook"}`), 30*time.Second)
		if err != nil {
			t.Errorf("replay request: %v", err)
		}
		answer <- m
	}()
	<-arrived
	cancel() // SIGTERM while the replayed card is at the bot
	select {
	case code := <-exit:
		if code != app.ExitOK {
			t.Errorf("exit code %d, want 0:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("service did not stop")
	}
	if n := deadLetters(); n != 0 {
		t.Errorf("%d dead letters when Run returned, want the delivered one removed", n)
	}
	var res []dispatch.ReplayResult
	if m := <-answer; m != nil {
		if err := json.Unmarshal(m.Data, &res); err != nil {
			t.Fatal(err)
		}
	}
	if len(res) != 1 || res[0].Delivered != 1 || res[0].Failed != 0 {
		t.Errorf("replay answer %s, want 1 delivered", fmt.Sprint(res))
	}
}

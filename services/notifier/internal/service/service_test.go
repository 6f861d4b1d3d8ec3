package service

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/feishu"
	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/services/notifier/internal/ratelimit"
	"github.com/opswire/opswire/services/notifier/internal/webhook"
	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/subject"
)

// TestConsumerConfig: one durable per cluster filtered to its OPS subjects,
// explicit acks, DeliverAll, and a BackOff of ackWait, 2×, 4×… capped at
// 10× with fewer entries than maxDeliver (the server requires it). Every
// configuration is also accepted by a real server.
func TestConsumerConfig(t *testing.T) {
	_, js := natstest.Connect(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: subject.OpsStream, Subjects: []string{"ops.>"}}); err != nil {
		t.Fatal(err)
	}
	sec := time.Second
	tests := []struct {
		name        string
		cluster     string
		ackWait     time.Duration
		maxDeliver  int
		wantDurable string
		wantFilter  string
		wantBackOff []time.Duration
	}{
		{"defaults", "prod", 30 * sec, 20, "opswire-notifier-prod-ops", "ops.prod.>",
			[]time.Duration{30 * sec, 60 * sec, 120 * sec, 240 * sec, 300 * sec, 300 * sec}},
		{"dotted cluster", "prod.eu-1", 2 * sec, 4, "opswire-notifier-prod_eu-1-ops", "ops.prod_eu-1.>",
			[]time.Duration{2 * sec, 4 * sec, 8 * sec}},
		{"one delivery: no backoff", "c", 10 * sec, 1, "opswire-notifier-c-ops", "ops.c.>", nil},
		{"two deliveries", "c", 10 * sec, 2, "opswire-notifier-c-ops", "ops.c.>", []time.Duration{10 * sec}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := config.Default().Notifier
			n.AckWait, n.MaxDeliver, n.MaxAckPending = config.D(tc.ackWait), tc.maxDeliver, 1234
			cc := ConsumerConfig(tc.cluster, "ops", n)
			if cc.Durable != tc.wantDurable || cc.FilterSubject != tc.wantFilter {
				t.Errorf("durable %q filter %q, want %q %q", cc.Durable, cc.FilterSubject, tc.wantDurable, tc.wantFilter)
			}
			if cc.AckPolicy != jetstream.AckExplicitPolicy || cc.DeliverPolicy != jetstream.DeliverAllPolicy ||
				cc.AckWait != tc.ackWait || cc.MaxDeliver != -1 || cc.MaxAckPending != 1234 {
				t.Errorf("consumer %+v", cc)
			}
			if len(cc.BackOff) != len(tc.wantBackOff) {
				t.Fatalf("backoff %v, want %v", cc.BackOff, tc.wantBackOff)
			}
			for i := range cc.BackOff {
				if cc.BackOff[i] != tc.wantBackOff[i] {
					t.Fatalf("backoff %v, want %v", cc.BackOff, tc.wantBackOff)
				}
			}
			if _, err := js.CreateOrUpdateConsumer(context.Background(), subject.OpsStream, cc); err != nil {
				t.Errorf("server rejects the consumer: %v", err)
			}
		})
	}
}

// TestBuildReceivers: URLs and secrets come inline, from a file (Secret
// volume, trailing newline trimmed) or an environment variable; each type
// gets its sink; receivers sharing a URL share one rate budget; every error
// names the receiver and never the URL or secret.
func TestBuildReceivers(t *testing.T) {
	var hits atomic.Int32
	var lastPath atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		lastPath.Store(r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"code":0,"msg":"success"}`))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	if err := os.WriteFile(urlFile, []byte(srv.URL+"/from-file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("UNIT_NOTIFIER_URL", srv.URL+"/from-env-token")
	n := config.Default().Notifier

	tests := []struct {
		name     string
		receiver config.Receiver
		wantType any
		wantPath string
		wantErr  string // substring; the error must not contain "token"
	}{
		{"feishu inline", config.Receiver{Name: "f", Type: config.ReceiverFeishu, URL: config.Secret(srv.URL + "/inline-token"), RatePerSecond: 5, RatePerMinute: 100},
			&feishu.Sink{}, "/inline-token", ""},
		{"webhook from file", config.Receiver{Name: "w", Type: config.ReceiverWebhook, URLFile: urlFile, RatePerSecond: 5, RatePerMinute: 100},
			&webhook.Sink{}, "/from-file-token", ""},
		{"feishu from env with secret", config.Receiver{Name: "e", URLEnv: "UNIT_NOTIFIER_URL", Secret: "s3cret-token", RatePerSecond: 5, RatePerMinute: 100},
			&feishu.Sink{}, "/from-env-token", ""},
		{"missing file", config.Receiver{Name: "mf", URLFile: filepath.Join(dir, "absent")}, nil, "", "receiver mf: url: read secret file"},
		{"unset env", config.Receiver{Name: "me", URLEnv: "UNIT_NOTIFIER_UNSET"}, nil, "", "receiver me: url: environment variable UNIT_NOTIFIER_UNSET is not set"},
		{"empty url", config.Receiver{Name: "eu"}, nil, "", "receiver eu: url: URL is empty"},
		{"not http", config.Receiver{Name: "nh", URL: "ftp://host/secret-token"}, nil, "", "receiver nh: webhook URL is not an absolute http(s) URL"},
		{"webhook not http", config.Receiver{Name: "wn", Type: config.ReceiverWebhook, URL: "host-only-token"}, nil, "", "receiver wn: webhook URL is not"},
		{"secret file missing", config.Receiver{Name: "sf", URL: config.Secret(srv.URL + "/x-token"), SecretFile: filepath.Join(dir, "nosecret")}, nil, "", "receiver sf: secret: read secret file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := BuildReceivers([]config.Receiver{tc.receiver}, n, srv.Client(), &ratelimit.Registry{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || len(rs) != 0 {
					t.Fatalf("BuildReceivers = %v, %v; want error %q", rs, err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "token") || strings.Contains(err.Error(), srv.URL) {
					t.Errorf("error leaks the URL or secret: %v", err)
				}
				return
			}
			if err != nil || len(rs) != 1 {
				t.Fatalf("BuildReceivers = %v, %v", rs, err)
			}
			r := rs[0]
			if r.Name != tc.receiver.Name || r.Limiter == nil || r.Timeout != tc.receiver.Timeout.Duration {
				t.Errorf("receiver %+v", r)
			}
			if got, want := typeName(r.Sink), typeName(tc.wantType); got != want {
				t.Errorf("sink %s, want %s", got, want)
			}
			before := hits.Load()
			if _, err := r.Sink.Send(context.Background(), &notify.Notification{Title: "t", Summary: "s", Time: time.Now()}); err != nil {
				t.Fatalf("send through the built sink: %v", err)
			}
			if hits.Load() != before+1 || lastPath.Load() != tc.wantPath {
				t.Errorf("sent to %v, want %s", lastPath.Load(), tc.wantPath)
			}
		})
	}

	t.Run("errors are joined, good receivers kept", func(t *testing.T) {
		rs, err := BuildReceivers([]config.Receiver{{Name: "bad1"}, {Name: "ok", URL: config.Secret(srv.URL + "/a")}, {Name: "bad2", URL: "nope"}},
			n, nil, &ratelimit.Registry{})
		if err == nil || !strings.Contains(err.Error(), "receiver bad1") || !strings.Contains(err.Error(), "receiver bad2") {
			t.Errorf("error %v, want both bad receivers named", err)
		}
		if len(rs) != 1 || rs[0].Name != "ok" {
			t.Errorf("receivers %v, want only ok", rs)
		}
	})

	t.Run("same URL shares a rate budget", func(t *testing.T) {
		same := config.Secret(srv.URL + "/same")
		rs, err := BuildReceivers([]config.Receiver{
			{Name: "a", URL: same, RatePerSecond: 5, RatePerMinute: 100},
			{Name: "b", Type: config.ReceiverWebhook, URL: same, RatePerSecond: 5, RatePerMinute: 100},
			{Name: "c", URL: config.Secret(srv.URL + "/other"), RatePerSecond: 5, RatePerMinute: 100},
		}, n, nil, &ratelimit.Registry{})
		if err != nil || len(rs) != 3 {
			t.Fatalf("BuildReceivers = %v, %v", rs, err)
		}
		if rs[0].Limiter != rs[1].Limiter {
			t.Errorf("receivers with one URL have separate limiters")
		}
		if rs[0].Limiter == rs[2].Limiter {
			t.Errorf("receivers with different URLs share a limiter")
		}
	})
}

func typeName(v any) string {
	switch v.(type) {
	case *feishu.Sink:
		return "feishu"
	case *webhook.Sink:
		return "webhook"
	case nil:
		return "nil"
	}
	return "other"
}

// TestBuildChatReceivers: each chat type gets its own sink, and the
// configuration's per-type defaults become the limiter's windows.
func TestBuildChatReceivers(t *testing.T) {
	cfg, err := config.Parse([]byte("notifier:\n  receivers:\n" +
		"  - {name: d, type: dingtalk, url: 'https://oapi.dingtalk.com/robot/send?access_token=x', secret: SECx, keyword: k}\n" +
		"  - {name: w, type: wecom, url: 'https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=x'}\n" +
		"  - {name: s, type: slack, url: 'https://hooks.slack.com/services/T/B/x'}\n" +
		"  - {name: t, type: teams, url: 'https://example.logic.azure.com/workflows/x/triggers/manual/paths/invoke?sig=x'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := BuildReceivers(cfg.NotifierReceivers(), cfg.Notifier, nil, &ratelimit.Registry{})
	if err != nil || len(rs) != 4 {
		t.Fatalf("BuildReceivers = %v, %v", rs, err)
	}
	want := map[string]string{"d": "*dingtalk.Sink", "w": "*wecom.Sink", "s": "*slack.Sink", "t": "*teams.Sink"}
	for _, r := range rs {
		if got := fmt.Sprintf("%T", r.Sink); got != want[r.Name] {
			t.Errorf("receiver %s: sink %s, want %s", r.Name, got, want[r.Name])
		}
	}
	// DingTalk: 20 per minute and nothing else; the 21st waits.
	lim := rs[0].Limiter
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if err := lim.Wait(ctx); err != nil {
			t.Fatalf("dingtalk admission %d: %v", i+1, err)
		}
		cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := lim.Wait(ctx); err == nil {
		t.Fatalf("dingtalk: 21st admission within a minute")
	}
}

// TestBuildReceiversLocales: a receiver's locale overrides the notifier's,
// and every receiver's cards are in notifier.timezone.
func TestBuildReceiversLocales(t *testing.T) {
	n := config.Default().Notifier
	n.Locale, n.Timezone = config.LocaleZhCN, "Asia/Shanghai"
	rs, err := BuildReceivers([]config.Receiver{{Name: "zh", URL: "https://x/a"}, {Name: "en", URL: "https://x/b", Locale: config.LocaleEN}},
		n, nil, &ratelimit.Registry{})
	if err != nil || len(rs) != 2 {
		t.Fatalf("BuildReceivers = %v, %v", rs, err)
	}
	for i, want := range []string{config.LocaleZhCN, config.LocaleEN} {
		if l := rs[i].Locale; l.Name() != want || l.Zone().String() != "Asia/Shanghai" {
			t.Errorf("receiver %s: locale %s in %v, want %s in Asia/Shanghai", rs[i].Name, l.Name(), l.Zone(), want)
		}
	}
}

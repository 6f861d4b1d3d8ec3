package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSeedAPIURLsBecomeReceiversAndRoutes(t *testing.T) {
	c, err := Load("testdata/seed.yml")
	if err != nil {
		t.Fatal(err)
	}
	recv := c.NotifierReceivers()
	if len(recv) != 2 {
		t.Fatalf("receivers = %d, want 2 (sendReport, delException)", len(recv))
	}
	for _, r := range recv {
		if r.Type != ReceiverFeishu || r.URL.Value() != "https://open.feishu.cn/open-apis/bot/v2/hook/xxx" ||
			r.RatePerSecond != 5 || r.RatePerMinute != 100 || r.Timeout.Duration != 10*time.Second {
			t.Errorf("receiver %s = %+v", r.Name, r)
		}
	}
	routes := c.NotifierRoutes()
	want := []struct {
		name, subject, receiver, title string
	}{
		{"sendReport", "ops.*.report.restarts", "sendReport", "pod重启次数过多"},
		{"sendReport-images", "ops.*.report.images.>", "sendReport", "Node image storage"},
		{"delException", "ops.*.cleanup.>", "delException", "删除异常状态 Pod"},
	}
	if len(routes) != len(want) {
		t.Fatalf("routes = %+v", routes)
	}
	for i, w := range want {
		r := routes[i]
		if r.Name != w.name || r.Subjects[0] != w.subject || r.Receivers[0] != w.receiver || r.Title != w.title ||
			!r.Continue || r.GroupWait.Duration != 5*time.Second || r.GroupInterval.Duration != 30*time.Second {
			t.Errorf("route %d = %+v, want %+v", i, r, w)
		}
	}
}

// TestSeedReceiversCanBeSigned: the seed sections carry the signing secret
// (inline, file or environment) and keyword of their implicit receivers.
func TestSeedReceiversCanBeSigned(t *testing.T) {
	c, err := Parse([]byte("sendReport:\n  apiurl: https://x/hook/a\n  secretEnv: REPORT_SECRET\n  keyword: ALERT\n" +
		"delException:\n  apiurl: https://x/hook/b\n  SecretFile: /etc/opswire/cleanup-secret\n  Keyword: ops\n"))
	if err != nil {
		t.Fatal(err)
	}
	recv := c.NotifierReceivers()
	if len(recv) != 2 {
		t.Fatalf("receivers = %+v", recv)
	}
	if r := recv[0]; r.Name != ImplicitReportReceiver || r.SecretEnv != "REPORT_SECRET" || r.Keyword != "ALERT" || r.Secret.IsSet() {
		t.Errorf("sendReport receiver = %+v", r)
	}
	if r := recv[1]; r.Name != ImplicitCleanupReceiver || r.SecretFile != "/etc/opswire/cleanup-secret" || r.Keyword != "ops" {
		t.Errorf("delException receiver = %+v", r)
	}
	c, err = Parse([]byte("delException:\n  apiurl: https://x/hook/b\n  secret: inline-s3cret\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := c.NotifierReceivers()[0]; r.Secret.Value() != "inline-s3cret" {
		t.Errorf("inline secret = %q", r.Secret.Value())
	}
}

func TestNotifierDefaultsWithoutSeedKeys(t *testing.T) {
	c, err := Parse([]byte("notifier:\n  receivers:\n  - name: ops\n    urlEnv: HOOK\n  routes:\n  - receivers: [ops]\n    groupWait: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	recv := c.NotifierReceivers()
	if len(recv) != 1 || recv[0].Type != ReceiverFeishu {
		t.Fatalf("receivers = %+v", recv)
	}
	routes := c.NotifierRoutes()
	if len(routes) != 1 || routes[0].Name != "route0" || routes[0].GroupWait.Duration != time.Second ||
		routes[0].GroupInterval.Duration != 30*time.Second || routes[0].Continue {
		t.Fatalf("routes = %+v", routes)
	}
	n := c.Notifier
	if n.MaxDeliver != 20 || n.DeliveredTTL.Duration != 24*time.Hour || n.BodyLimit != 20000 || n.TopRows != 10 {
		t.Fatalf("defaults = %+v", n)
	}
}

func TestNotifierValidation(t *testing.T) {
	tests := []struct {
		name, doc string
		fields    []string // empty: valid
	}{
		{"route to implicit receiver", "sendReport:\n  apiurl: https://x/hook/a\nnotifier:\n  routes:\n  - subjects: ['ops.*.cordon.>']\n    receivers: [sendReport]\n", nil},
		{"default receiver implicit", "delException:\n  apiurl: https://x/hook/a\nnotifier:\n  defaultReceivers: [delException]\n", nil},
		{"implicit receiver absent", "notifier:\n  routes:\n  - receivers: [sendReport]\n", []string{"notifier.routes[0].receivers"}},
		{"implicit name taken", "sendReport:\n  apiurl: https://x/hook/a\nnotifier:\n  receivers:\n  - name: sendReport\n    url: https://y\n", []string{"notifier.receivers[0].name"}},
		{"duplicate receiver", "notifier:\n  receivers:\n  - name: a\n    url: u\n  - name: a\n    url: v\n", []string{"notifier.receivers[1].name"}},
		{"bad receiver name", "notifier:\n  receivers:\n  - name: a.b\n    url: u\n", []string{"notifier.receivers[0].name"}},
		{"no url", "notifier:\n  receivers:\n  - name: a\n", []string{"notifier.receivers[0].url"}},
		{"two urls", "notifier:\n  receivers:\n  - name: a\n    url: u\n    urlEnv: X\n", []string{"notifier.receivers[0].url"}},
		{"two secrets", "notifier:\n  receivers:\n  - name: a\n    url: u\n    secret: s\n    secretFile: /f\n", []string{"notifier.receivers[0].secret"}},
		{"seed secrets", "sendReport:\n  apiurl: https://x/hook/a\n  secret: s\n  secretEnv: E\n", []string{"sendReport.secret"}},
		{"seed secret without apiurl", "delException:\n  secretFile: /f\n  keyword: k\n", []string{"delException.apiurl"}},
		{"bad type", "notifier:\n  receivers:\n  - name: a\n    type: telegram\n    url: u\n", []string{"notifier.receivers[0].type"}},
		{"signed dingtalk with keyword", "notifier:\n  receivers:\n  - name: a\n    type: dingtalk\n    url: u\n    secretEnv: S\n    keyword: k\n", nil},
		{"every new type", "notifier:\n  receivers:\n  - {name: a, type: wecom, url: u}\n  - {name: b, type: slack, url: u}\n  - {name: c, type: teams, url: u, ratePerHour: 10, bodyLimit: 20000}\n", nil},
		{"bodyLimit on feishu", "notifier:\n  receivers:\n  - name: a\n    url: u\n    bodyLimit: 5000\n", []string{"notifier.receivers[0].bodyLimit"}},
		{"secret on slack", "notifier:\n  receivers:\n  - name: a\n    type: slack\n    url: u\n    secret: s\n", []string{"notifier.receivers[0].secret"}},
		{"keyword on wecom", "notifier:\n  receivers:\n  - name: a\n    type: wecom\n    url: u\n    keyword: k\n", []string{"notifier.receivers[0].keyword"}},
		{"bad receiver limits", "notifier:\n  receivers:\n  - name: a\n    type: teams\n    url: u\n    ratePerHour: -1\n    bodyLimit: 10\n", []string{"notifier.receivers[0].ratePerHour", "notifier.receivers[0].bodyLimit"}},
		{"route name defaulted onto a configured one", "notifier:\n  receivers:\n  - {name: a, url: u}\n  routes:\n  - {name: route1, receivers: [a], continue: true}\n  - {receivers: [a]}\n", []string{"notifier.routes[1].name"}},
		{"route named like a seed route", "delException:\n  apiurl: https://x/hook/a\nnotifier:\n  routes:\n  - {name: delException, receivers: [delException]}\n", []string{"notifier.routes[0].name"}},
		{"route named like the default route", "notifier:\n  receivers:\n  - {name: a, url: u}\n  routes:\n  - {name: default, receivers: [a]}\n  defaultReceivers: [a]\n", []string{"notifier.routes[0].name"}},
		{"route named default without default receivers", "notifier:\n  receivers:\n  - {name: a, url: u}\n  routes:\n  - {name: default, receivers: [a]}\n", nil},
		{"defaulted route names after seed routes", "sendReport:\n  apiurl: https://x/hook/a\nnotifier:\n  routes:\n  - {receivers: [sendReport]}\n  - {receivers: [sendReport]}\n", nil},
		{"keyword on webhook", "notifier:\n  receivers:\n  - name: a\n    type: webhook\n    url: u\n    keyword: k\n", []string{"notifier.receivers[0].keyword"}},
		{"negative rate", "notifier:\n  receivers:\n  - name: a\n    url: u\n    ratePerMinute: -1\n", []string{"notifier.receivers[0].ratePerMinute"}},
		{"bad subject", "notifier:\n  receivers:\n  - name: a\n    url: u\n  routes:\n  - receivers: [a]\n    subjects: ['ops.>.x', 'ops..a', 'ops.a*']\n", []string{"notifier.routes[0].subjects"}},
		{"bad severity", "notifier:\n  receivers:\n  - name: a\n    url: u\n  routes:\n  - receivers: [a]\n    severities: [fatal]\n", []string{"notifier.routes[0].severities"}},
		{"route without receivers", "notifier:\n  routes:\n  - subjects: ['ops.>']\n", []string{"notifier.routes[0].receivers"}},
		{"unknown default", "notifier:\n  defaultReceivers: [nobody]\n", []string{"notifier.defaultReceivers"}},
		{"receiver twice in a route", "notifier:\n  receivers:\n  - {name: a, url: u}\n  routes:\n  - {name: r, receivers: [a, a]}\n", []string{"notifier.routes[0].receivers"}},
		{"implicit receiver twice in a route", "sendReport:\n  apiurl: https://x/hook/a\nnotifier:\n  routes:\n  - {receivers: [sendReport, sendReport]}\n", []string{"notifier.routes[0].receivers"}},
		{"default receiver twice", "notifier:\n  receivers:\n  - {name: a, url: u}\n  defaultReceivers: [a, a]\n", []string{"notifier.defaultReceivers"}},
		{"two receivers in a route", "notifier:\n  receivers:\n  - {name: a, url: u}\n  - {name: b, url: v}\n  routes:\n  - {receivers: [a, b]}\n  defaultReceivers: [b, a]\n", nil},
		{"retry bounds", "notifier:\n  retryInitial: 10s\n  retryMax: 1s\n", []string{"notifier.retryMax"}},
		{"tiny ack wait", "notifier:\n  ackWait: 100ms\n", []string{"notifier.ackWait"}},
		{"zero durations", "notifier:\n  giveUpAfter: 0\n  deliveredTTL: 0\n", []string{"notifier.giveUpAfter", "notifier.deliveredTTL"}},
		{"small body limit", "notifier:\n  bodyLimit: 100\n  topRows: 0\n", []string{"notifier.bodyLimit", "notifier.topRows"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if len(tc.fields) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error = %v, want Errors", err)
			}
			got := map[string]bool{}
			for _, fe := range errs {
				got[fe.Field] = true
			}
			for _, f := range tc.fields {
				if !got[f] {
					t.Errorf("errors %v do not name %q", err, f)
				}
			}
		})
	}
}

func TestReceiverTypeDefaults(t *testing.T) {
	c, err := Parse([]byte("notifier:\n  receivers:\n  - {name: f, url: u}\n  - {name: d, type: dingtalk, url: u}\n  - {name: w, type: wecom, url: u}\n  - {name: s, type: slack, url: u}\n  - {name: t, type: teams, url: u}\n  - {name: t2, type: teams, url: u, ratePerSecond: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][4]int{"f": {5, 100, 0, 0}, "d": {0, 20, 0, 20000}, "w": {0, 20, 0, 4096}, "s": {1, 0, 0, 40000}, "t": {4, 60, 75, 28000}, "t2": {2, 60, 75, 28000}}
	for _, r := range c.NotifierReceivers() {
		if got := [4]int{r.RatePerSecond, r.RatePerMinute, r.RatePerHour, r.BodyLimit}; got != want[r.Name] {
			t.Errorf("%s (%s): rates and budget %v, want %v", r.Name, r.Type, got, want[r.Name])
		}
	}
}

// TestDuplicateRouteNamesRefused: a route's name is its identity in
// delivered-id keys, group keys and dead letters, like a receiver's, so two
// routes of one name are refused: their groups and keys would merge (an
// event both match with continue counted twice in one card), and a replay
// would find only the first by name (route.Table.ByName).
func TestDuplicateRouteNamesRefused(t *testing.T) {
	_, err := Parse([]byte(`
notifier:
  receivers:
  - {name: a, type: webhook, url: "https://example.com/hook"}
  routes:
  - {name: x, subjects: ["ops.*.cleanup.>"], receivers: [a], continue: true}
  - {name: x, severities: [warning], receivers: [a]}
`))
	if err == nil || !strings.Contains(err.Error(), "notifier.routes[1].name") {
		t.Errorf("two routes named x: error %v, want one naming notifier.routes[1].name", err)
	}
}

// TestWebhookSecretRefused: secrets are refused for types that do not sign,
// so a mistaken config is an error, not a silently unused value; the
// generic webhook does not sign (webhook.New takes no secret).
func TestWebhookSecretRefused(t *testing.T) {
	_, err := Parse([]byte(`
notifier:
  receivers:
  - {name: a, type: webhook, url: "https://example.com/hook", secret: s3cr3t}
`))
	if err == nil || !strings.Contains(err.Error(), "notifier.receivers[0].secret") {
		t.Errorf("webhook with a secret: error %v, want one naming notifier.receivers[0].secret", err)
	}
}

// TestReceiverListedTwiceRefused: a receiver listed twice in one route (or
// in defaultReceivers) would get every matching event twice, in two cards;
// the error names the route and the receiver.
func TestReceiverListedTwiceRefused(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // in the error
	}{
		{"in a route", "notifier:\n  receivers:\n  - {name: a, type: webhook, url: \"https://example.com/hook\"}\n  routes:\n  - {name: cleanup, receivers: [a, a]}\n",
			[]string{"notifier.routes[0].receivers", `"a"`, `"cleanup"`}},
		{"in defaultReceivers", "notifier:\n  receivers:\n  - {name: a, type: webhook, url: \"https://example.com/hook\"}\n  defaultReceivers: [a, a]\n",
			[]string{"notifier.defaultReceivers", `"a"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestSendTimeoutUnderTwoThirdsOfAckWait: a request still at the receiver
// when its message's ack wait runs out (after a lost lease) has the message
// redelivered to the next active replica, which sends the card again.
// Progress acks go every ackWait/3 and stop when a term ends, so a request
// may start with only two thirds of ackWait left: a timeout not under that
// is refused, naming the field and notifier.ackWait. Left out, the request
// timeout follows a lowered ackWait.
func TestSendTimeoutUnderTwoThirdsOfAckWait(t *testing.T) {
	tests := []struct {
		name, doc string
		refused   []string      // fields refused
		timeout   time.Duration // the request timeout of a valid config
	}{
		{"defaults", "", nil, 10 * time.Second},
		{"request timeout over two thirds of ackWait", "notifier:\n  ackWait: 30s\n  requestTimeout: 25s\n", []string{"notifier.requestTimeout"}, 0},
		{"request timeout at two thirds of ackWait", "notifier:\n  ackWait: 6s\n  requestTimeout: 4s\n", []string{"notifier.requestTimeout"}, 0},
		{"request timeout below two thirds of ackWait", "notifier:\n  ackWait: 6s\n  requestTimeout: 3s\n", nil, 3 * time.Second},
		{"ackWait lowered, request timeout left out", "notifier:\n  ackWait: 2s\n", nil, time.Second},
		{"ackWait raised, request timeout left out", "notifier:\n  ackWait: 60s\n", nil, 10 * time.Second},
		{"a receiver's timeout", "notifier:\n  ackWait: 3s\n  requestTimeout: 1s\n  receivers:\n  - {name: a, url: u, timeout: 5s}\n  - {name: b, url: u, timeout: 1500ms}\n",
			[]string{"notifier.receivers[0].timeout"}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				if got := c.Notifier.RequestTimeout.Duration; got != tc.timeout {
					t.Errorf("requestTimeout = %v, want %v", got, tc.timeout)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("want refused on %v, got %v", tc.refused, err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Field)
				if !strings.Contains(e.Msg, "notifier.ackWait") {
					t.Errorf("%s: %q does not name notifier.ackWait", e.Field, e.Msg)
				}
			}
			if !slices.Equal(got, tc.refused) {
				t.Errorf("refused %v, want %v", got, tc.refused)
			}
		})
	}
}

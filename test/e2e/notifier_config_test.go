package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opswire/opswire/test/harness"
)

// TestNotifierRefusesConfigsThatSendTwice: the real notifier binary refuses,
// at start and with --check-config, each configuration that would make it
// send a card twice, exiting 2 and naming the field: a receiver listed twice
// in a route (it would get every event twice) or in defaultReceivers, and a
// request timeout that can outlast its message's ack wait (a request still at
// the receiver after a lost lease has the message redelivered to the next
// replica, which sends the card again).
func TestNotifierRefusesConfigsThatSendTwice(t *testing.T) {
	bin := harness.Build(t, "notifier")
	const receivers = `
  receivers:
  - {name: ops, type: webhook, url: "http://127.0.0.1:1/hook"}
`
	tests := []struct {
		name, notifier string
		field          string // named in the refusal
	}{
		{"a receiver twice in a route", "  routes:\n  - {name: all, receivers: [ops, ops]}\n", `notifier.routes[0].receivers`},
		{"a receiver twice in defaultReceivers", "  defaultReceivers: [ops, ops]\n", `notifier.defaultReceivers`},
		{"a request timeout of two thirds of ackWait", "  ackWait: 6s\n  requestTimeout: 4s\n  routes:\n  - {receivers: [ops]}\n", `notifier.requestTimeout`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "config.yml")
			doc := "cluster:\n  name: e2e\nnotifier:" + receivers + tc.notifier
			if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"--config", cfg}, {"--check-config", "--config", cfg}} {
				out, err := exec.Command(bin, args...).CombinedOutput()
				exit, ok := err.(*exec.ExitError)
				if !ok || exit.ExitCode() != 2 {
					t.Fatalf("notifier %v: exit = %v, want code 2; output %s", args, err, out)
				}
				if !strings.Contains(string(out), tc.field) {
					t.Errorf("notifier %v: output does not name %s:\n%s", args, tc.field, out)
				}
			}
		})
	}
}

package render

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/services/notifier/internal/notify"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

var markdownLink = regexp.MustCompile(`\[[^\[\]]*\]\([^()]*\)`)

// FuzzClean: text from the cluster (status reasons, admission messages,
// names) must come out as one line with no markup that can mention people,
// break the card's markdown or hide a link target.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"6 pods >= maxPods 6", "<at id=all></at>", "[click](http://x)", "[[a](b)](c)",
		"**bold** | `code`\nnext", strings.Repeat("é", 200)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Clean(s)
		if strings.ContainsAny(out, "<>\r\n\t*|`") {
			t.Fatalf("Clean(%q) = %q keeps markup", s, out)
		}
		if markdownLink.MatchString(out) || strings.Contains(out, "](") {
			t.Fatalf("Clean(%q) = %q keeps a markdown link", s, out)
		}
		if n := len([]rune(out)); n > 160 {
			t.Fatalf("Clean(%q) is %d characters long", s, n)
		}
	})
}

// FuzzRender: any OPS message that decodes must render to notifications
// without a panic, whatever its fields hold.
func FuzzRender(f *testing.F) {
	f.Add(events.TypeCleanup, []byte(`{"verb":"deleted","namespace":"ns","pod":"p","reason":"Evicted","severity":"info"}`))
	f.Add(events.TypeCordon, []byte(`{"verb":"cordoned","node":"n1","reason":"6 pods >= maxPods 6","severity":"warning"}`))
	f.Add(events.TypeRestartReport, []byte(`{"rows":[{"namespace":"ns","pod":"p","restarts":500}],"total":1}`))
	f.Add(events.TypeImageAlert, []byte(`{"node":"n","bytes":-1,"images":50,"truncated":true}`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		ev, err := envelope.New("id", "opswire/c/x", typ, "", nil, time.Unix(0, 0))
		if err != nil {
			return
		}
		h := ev.Msg("ops.c.x").Header
		it, err := notify.Decode("ops.c.x", nats.Header(h), data)
		if err != nil {
			return
		}
		g := Group{Route: "r", Key: "k", Cluster: "c", Now: time.Unix(0, 0)}
		for _, n := range Render(g, []*notify.Item{it, it}) {
			if n == nil {
				t.Fatal("Render returned a nil notification")
			}
		}
	})
}

package envelope

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

type payload struct {
	Name string `json:"name"`
}

func TestRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 123, time.UTC)
	ev, err := New("pod/u1/42", Source("prod", "watcher"), "io.opswire.test.v1", "ns/p", payload{Name: "p"}, now)
	if err != nil {
		t.Fatal(err)
	}
	m := ev.Msg("kube.prod.pod.ns.p")
	if got := m.Header.Get(HeaderMsgID); got != "pod/u1/42" {
		t.Fatalf("Nats-Msg-Id = %q, want ce-id", got)
	}
	var out payload
	back, err := Decode(m.Header, m.Data, "io.opswire.test.v1", &out)
	if err != nil {
		t.Fatal(err)
	}
	if out.Name != "p" || back.ID != ev.ID || !back.Time.Equal(now) || back.Source != "opswire/prod/watcher" {
		t.Fatalf("round trip mismatch: %+v %+v", back, out)
	}
}

func TestDecodeRejects(t *testing.T) {
	good := func() nats.Header {
		ev, _ := New("id", "src", "t.v1", "", payload{}, time.Now())
		return ev.Msg("s").Header
	}
	tests := []struct {
		name   string
		header nats.Header
		data   string
		typ    string
	}{
		{"no headers", nil, `{}`, "t.v1"},
		{"wrong spec", func() nats.Header { h := good(); h.Set(HeaderSpecVersion, "0.3"); return h }(), `{}`, "t.v1"},
		{"missing id", func() nats.Header { h := good(); h.Del(HeaderID); return h }(), `{}`, "t.v1"},
		{"bad time", func() nats.Header { h := good(); h.Set(HeaderTime, "yesterday"); return h }(), `{}`, "t.v1"},
		{"wrong type", good(), `{}`, "other.v1"},
		{"bad json", good(), `{`, "t.v1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out payload
			_, err := Decode(tc.header, []byte(tc.data), tc.typ, &out)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode error = %v, want ErrMalformed", err)
			}
		})
	}
}

// TestPayloadWithoutHTMLEscaping: OPS and KUBE payloads read as written
// (`>=`, `<`, `&`), and the same value always gives the same bytes (the
// watcher's ids and hashes depend on it).
func TestPayloadWithoutHTMLEscaping(t *testing.T) {
	payload := map[string]any{"reason": "6 non-terminated pods >= maxPods 6", "note": "a < b && c"}
	e, err := New("id", "src", "type", "", payload, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"note":"a < b && c","reason":"6 non-terminated pods >= maxPods 6"}`
	if string(e.Data) != want {
		t.Fatalf("payload = %s, want %s", e.Data, want)
	}
	again, _ := Marshal(payload)
	if string(again) != want {
		t.Fatalf("Marshal is not deterministic: %s", again)
	}
	var back map[string]any
	if err := json.Unmarshal(e.Data, &back); err != nil || back["reason"] != payload["reason"] {
		t.Fatalf("round trip: %v %v", back, err)
	}
}

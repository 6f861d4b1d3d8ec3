package envelope

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// FuzzParse feeds arbitrary headers and bodies to the envelope parser every
// consumer runs first. It must never panic, and whatever it accepts must come
// back unchanged through Msg, the publisher's side of the contract.
func FuzzParse(f *testing.F) {
	good, _ := New("pod/u1/7", Source("prod", "watcher"), "io.opswire.kube.pod.v1", "pod/ns/p", map[string]int{"a": 1},
		time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	m := good.Msg("kube.prod.pod.ns.p")
	f.Add(m.Header.Get(HeaderSpecVersion), m.Header.Get(HeaderID), m.Header.Get(HeaderSource), m.Header.Get(HeaderType),
		m.Header.Get(HeaderTime), m.Header.Get(HeaderSubject), m.Data)
	f.Add("1.0", "x", "y", "z", "not a time", "", []byte("{"))
	f.Add("0.3", "", "", "", "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, spec, id, source, typ, ts, subj string, data []byte) {
		h := nats.Header{}
		for k, v := range map[string]string{HeaderSpecVersion: spec, HeaderID: id, HeaderSource: source,
			HeaderType: typ, HeaderTime: ts, HeaderSubject: subj} {
			if v != "" {
				h.Set(k, v)
			}
		}
		e, err := Parse(h, data)
		if err != nil {
			return
		}
		if e.ID != id || e.Source != source || e.Type != typ || e.Subject != subj {
			t.Fatalf("Parse changed the envelope: %+v", e)
		}
		back, err := Parse(e.Msg("s").Header, e.Data)
		if err != nil {
			t.Fatalf("an accepted event does not survive Msg: %v", err)
		}
		if back.ID != e.ID || back.Source != e.Source || back.Type != e.Type || back.Subject != e.Subject ||
			!back.Time.Equal(e.Time) || string(back.Data) != string(e.Data) {
			t.Fatalf("round trip %+v -> %+v", e, back)
		}
		var out map[string]any
		_, _ = Decode(h, data, typ, &out) // must not panic on any body
	})
}

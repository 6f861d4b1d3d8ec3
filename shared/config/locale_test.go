package config

import (
	"errors"
	"strings"
	"testing"
)

// TestNotifierLocale: the seed's Chinese titles make cards zh-CN when no
// locale is set, and say so; an explicit locale wins; English titles stay en;
// a receiver's locale overrides the notifier's.
func TestNotifierLocale(t *testing.T) {
	seed, err := Load("testdata/seed.yml")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, doc, want, note string
	}{
		{"seed", "", LocaleZhCN, `sendReport.msgtitle ("pod重启次数过多") is Chinese`},
		{"explicit en", "notifier:\n  locale: en\n", LocaleEN, ""},
		{"english titles", "sendReport:\n  msgtitle: Restarts\n", LocaleEN, ""},
		{"route title", "notifier:\n  receivers: [{name: a, url: https://x/a}]\n  routes: [{receivers: [a], title: 节点告警}]\n", LocaleZhCN, "notifier.routes[0].title"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := seed
			if tc.name != "seed" {
				if c, err = Parse([]byte(tc.doc)); err != nil {
					t.Fatal(err)
				}
			}
			got, note := c.NotifierLocale()
			if got != tc.want || (tc.note == "") != (note == "") || !strings.Contains(note, tc.note) {
				t.Errorf("NotifierLocale = %q, %q; want %q with a note containing %q", got, note, tc.want, tc.note)
			}
		})
	}
	c, err := Parse([]byte("notifier:\n  locale: zh-CN\n  receivers: [{name: a, url: https://x/a, locale: en}, {name: b, url: https://x/b}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.ReceiverLocale(c.Notifier.Receivers[0]), c.ReceiverLocale(c.Notifier.Receivers[1]); a != LocaleEN || b != LocaleZhCN {
		t.Errorf("receiver locales = %q, %q; want en, zh-CN", a, b)
	}
}

// TestNotifierTimezone: the zone defaults to TZ, names the field when it is
// not a zone (and says when TZ gave it), and is loaded from the embedded
// database.
func TestNotifierTimezone(t *testing.T) {
	t.Setenv("TZ", "Asia/Shanghai")
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Notifier.Timezone != "Asia/Shanghai" || c.Notifier.Location().String() != "Asia/Shanghai" {
		t.Errorf("timezone = %q (%v), want Asia/Shanghai from TZ", c.Notifier.Timezone, c.Notifier.Location())
	}
	c, err = Parse([]byte("notifier:\n  timezone: Europe/Berlin\n"))
	if err != nil || c.Notifier.Location().String() != "Europe/Berlin" {
		t.Errorf("timezone Europe/Berlin: %v, %v", c, err)
	}
	for _, tc := range []struct{ tz, doc, field, msg string }{
		{"UTC", "notifier:\n  timezone: Mars/Olympus\n", "notifier.timezone", `"Mars/Olympus" is not an IANA time zone name`},
		{"Beijing", "", "notifier.timezone", "TZ environment variable"},
		{"UTC", "notifier:\n  locale: fr\n", "notifier.locale", `got "fr"`},
		{"UTC", "notifier:\n  receivers: [{name: a, url: https://x/a, locale: zh}]\n", "notifier.receivers[0].locale", `got "zh"`},
	} {
		t.Setenv("TZ", tc.tz)
		_, err := Parse([]byte(tc.doc))
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs[0].Msg, tc.msg) {
			t.Errorf("TZ=%s %q: error %v, want one on %s saying %q", tc.tz, tc.doc, err, tc.field, tc.msg)
		}
	}
	t.Setenv("TZ", "")
	if c, err := Parse(nil); err != nil || c.Notifier.Location() != nil && c.Notifier.Location().String() != "UTC" {
		t.Errorf("no TZ: %v, location %v, want UTC", err, c.Notifier.Location())
	}
}

package locale

import (
	"testing"
	"time"
)

// TestCatalogueIsComplete: every word Word translates has a zh-CN text, and
// both locales are served by the catalogue.
func TestCatalogueIsComplete(t *testing.T) {
	for w := range words {
		if zhCN[w] == "" || zhCN[w] == w {
			t.Errorf("word %q has no zh-CN text", w)
		}
	}
	if got := len(cat.Languages()); got != 2 {
		t.Errorf("catalogue serves %d languages (%v), want en and zh-CN", got, cat.Languages())
	}
	zh := New(ZhCN, nil)
	if got := zh.Word("newverb"); got != "newverb" {
		t.Errorf("an unknown word became %q", got)
	}
	if got := zh.T("**%d** cleanup results: %s", 12345, "x"); got != "**12345** 条清理结果：x" {
		t.Errorf("count printed as %q (no digit grouping wanted)", got)
	}
	var nilLocale *Locale
	if nilLocale.Name() != EN || nilLocale.Zone() != time.UTC || New("fr", nil).Name() != EN {
		t.Error("nil or unknown locale is not English in UTC")
	}
}

// TestTimeNamesTheZone: the footer time is in the locale's zone, named.
func TestTimeNamesTheZone(t *testing.T) {
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 7, 2, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		l    *Locale
		want string
	}{
		{New(ZhCN, sh), "2026-12-07 10:00:00 CST"},
		{New(EN, sh), "2026-12-07 10:00:00 CST"},
		{New(EN, nil), "2026-12-07 02:00:00 UTC"},
		{nil, "2026-12-07 02:00:00 UTC"},
	} {
		if got := tc.l.Time(at); got != tc.want {
			t.Errorf("%s: Time = %q, want %q", tc.l.Name(), got, tc.want)
		}
	}
}

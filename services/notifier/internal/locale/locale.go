// Package locale is the notifier's message catalogue: every text a person
// reads on a card (titles, summaries, column labels, "…and N more", the
// footer, severity labels and the words opswire itself puts in cells, such
// as verbs and modes) is looked up here by its English text, with en and
// zh-CN built in (golang.org/x/text/message and its catalog). A Locale also
// carries the time zone card times are shown in.
//
// English output is exactly what the notifier printed before it had a
// catalogue: counts are printed without digit grouping (chat users and
// scripts copy them, and the e2e tests parse them), and sizes keep their
// IEC units, which zh-CN uses too. The two built-in locales share the
// decimal point, so only the words differ.
package locale

import (
	"strings"
	"time"

	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"golang.org/x/text/message/catalog"
	"golang.org/x/text/number"
)

// Names of the built-in locales, as notifier.locale takes them.
const (
	EN   = "en"
	ZhCN = "zh-CN"
)

// Locale formats card text in one language and one time zone. A nil
// *Locale is English in UTC, what the notifier printed before locales.
type Locale struct {
	name  string
	p     *message.Printer
	zone  *time.Location
	words map[string]string // Word's translations, looked up once
}

var (
	cat      = build()
	fallback = New(EN, time.UTC)
)

// build makes the catalogue: each English key with its zh-CN text, and the
// English text set explicitly too, so both languages are listed as served.
func build() *catalog.Builder {
	b := catalog.NewBuilder(catalog.Fallback(language.English))
	zh := language.MustParse(ZhCN)
	for en, t := range zhCN {
		if err := b.SetString(language.English, en, en); err != nil {
			panic(err)
		}
		if err := b.SetString(zh, en, t); err != nil {
			panic(err)
		}
	}
	return b
}

// Supported reports whether name is a built-in locale.
func Supported(name string) bool { return name == EN || name == ZhCN }

// New returns the locale name (en or zh-CN; anything else is English) with
// times in zone (nil: UTC).
func New(name string, zone *time.Location) *Locale {
	if zone == nil {
		zone = time.UTC
	}
	tag := language.English
	if name == ZhCN {
		tag = language.MustParse(ZhCN)
	} else {
		name = EN
	}
	l := &Locale{name: name, p: message.NewPrinter(tag, message.Catalog(cat)), zone: zone, words: map[string]string{}}
	for w := range words {
		l.words[w] = l.p.Sprintf(w)
	}
	return l
}

func (l *Locale) get() *Locale {
	if l == nil {
		return fallback
	}
	return l
}

// Name is en or zh-CN.
func (l *Locale) Name() string { return l.get().name }

// Zone is the time zone card times are shown in.
func (l *Locale) Zone() *time.Location { return l.get().zone }

// T formats the catalogue message whose English text is key. Integer
// arguments are printed without digit grouping.
func (l *Locale) T(key string, args ...any) string {
	for i, a := range args {
		switch v := a.(type) {
		case int:
			args[i] = number.Decimal(v, number.NoSeparator())
		case int64:
			args[i] = number.Decimal(v, number.NoSeparator())
		}
	}
	return l.get().p.Sprintf(key, args...)
}

// Time is a card time in the locale's zone, named by its abbreviation:
// "2026-12-07 10:00:00 CST".
func (l *Locale) Time(t time.Time) string {
	return t.In(l.get().zone).Format("2006-01-02 15:04:05 MST")
}

// Word translates a word opswire itself writes into a card (a verb, a
// severity, a report mode, an image alert reason); a word the catalogue
// does not know (a newer service's verb) is returned as it is.
func (l *Locale) Word(w string) string {
	if t, ok := l.get().words[w]; ok {
		return t
	}
	return w
}

// SeverityLabel is a severity as a card's title prefix shows it:
// CRITICAL, WARNING, INFO in English.
func (l *Locale) SeverityLabel(s string) string {
	if l.get().name == EN {
		return strings.ToUpper(s)
	}
	return l.Word(s)
}

// defaultTitles are the English titles the configuration defaults to
// (sendReport.msgtitle, imageAlert.msgtitle) and the notifier's own.
var defaultTitles = map[string]bool{"Pods restarting too often": true, "Node image storage": true,
	"Pod cleanup": true, "Node cordon": true}

// Title translates a card title that is one of the English defaults; any
// other title (a route's, the seed's msgtitle) is the user's and is kept.
func (l *Locale) Title(s string) string {
	if defaultTitles[s] {
		return l.T(s)
	}
	return s
}

package config

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	// Card times are shown in notifier.timezone, which every service
	// validates; distroless images have no zoneinfo, so the database is
	// built in (about 450 KB).
	_ "time/tzdata"
)

// Locales the notifier has built in (notifier.locale, receivers[].locale).
const (
	LocaleEN   = "en"
	LocaleZhCN = "zh-CN"
)

var locales = []string{LocaleEN, LocaleZhCN}

// Receiver types.
const (
	ReceiverFeishu   = "feishu"
	ReceiverWebhook  = "webhook"
	ReceiverDingTalk = "dingtalk"
	ReceiverWeCom    = "wecom"
	ReceiverSlack    = "slack"
	ReceiverTeams    = "teams"
)

// receiverTypes are the accepted types, in the order errors list them.
var receiverTypes = []string{ReceiverFeishu, ReceiverWebhook, ReceiverDingTalk, ReceiverWeCom, ReceiverSlack, ReceiverTeams}

// ReceiverDefaults are a receiver type's documented limits: the rates of
// one bot or hook and the request budget in bytes (0 = no such window, or
// the sink's own budget).
type ReceiverDefaults struct {
	PerSecond, PerMinute, PerHour, BodyLimit int
}

// DefaultsFor returns the limits opswire assumes for a receiver type
// (docs/notifier.md cites each): Feishu 5/s and 100/min; DingTalk and WeCom
// 20/min per bot; Slack 1/s per webhook; Teams 4/s, 60/30 s (kept as
// 60/min), 100/h, 150/2 h and 1800/day (kept as 75/h, which satisfies all
// three). The generic webhook keeps Feishu's figures as a polite default.
func DefaultsFor(typ string) ReceiverDefaults {
	switch typ {
	case ReceiverDingTalk:
		return ReceiverDefaults{PerMinute: 20, BodyLimit: 20000}
	case ReceiverWeCom:
		return ReceiverDefaults{PerMinute: 20, BodyLimit: 4096}
	case ReceiverSlack:
		return ReceiverDefaults{PerSecond: 1, BodyLimit: 40000}
	case ReceiverTeams:
		return ReceiverDefaults{PerSecond: 4, PerMinute: 60, PerHour: 75, BodyLimit: 28000}
	}
	return ReceiverDefaults{PerSecond: 5, PerMinute: 100, BodyLimit: 20000}
}

// Names of the receivers and routes the seed's sendReport.apiurl and
// delException.apiurl turn into, without any notifier configuration.
const (
	ImplicitReportReceiver  = "sendReport"
	ImplicitCleanupReceiver = "delException"
)

// receiverName: receiver names become NATS subject tokens
// (notify.<cluster>.<receiver>.<outcome>) and KV keys, so they are limited to
// characters both accept.
var receiverName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Receiver is one destination. URL and Secret may each come from the file,
// from a file path, or from an environment variable (a Kubernetes Secret).
type Receiver struct {
	Name string `json:"name"`
	// Type is feishu (default), webhook (generic JSON POST), dingtalk,
	// wecom, slack or teams.
	Type       string `json:"type"`
	URL        Secret `json:"url"`
	URLFile    string `json:"urlFile"`
	URLEnv     string `json:"urlEnv"`
	Secret     Secret `json:"secret"`
	SecretFile string `json:"secretFile"`
	SecretEnv  string `json:"secretEnv"`
	// Keyword is put into the title for bots with keyword security
	// (feishu, dingtalk).
	Keyword string `json:"keyword"`
	// RatePerSecond, RatePerMinute and RatePerHour default to the type's
	// documented limits (DefaultsFor); receivers with the same URL share one
	// budget.
	RatePerSecond int `json:"ratePerSecond"`
	RatePerMinute int `json:"ratePerMinute"`
	RatePerHour   int `json:"ratePerHour"`
	// BodyLimit is the request budget in bytes for dingtalk, wecom (the
	// markdown content), slack and teams; 0 uses the type's default.
	// Feishu receivers use notifier.bodyLimit.
	BodyLimit int `json:"bodyLimit"`
	// Timeout bounds one HTTP request; 0 uses notifier.requestTimeout.
	Timeout Duration `json:"timeout"`
	// Locale overrides notifier.locale for this receiver's cards (en or zh-CN).
	Locale string `json:"locale"`
}

// Route sends matching OPS messages to receivers. Routes are tried in order;
// the first match wins unless it has Continue=true, in which case later routes
// are tried too (Alertmanager semantics).
type Route struct {
	Name string `json:"name"`
	// Subjects are NATS subject patterns (wildcards allowed); empty = all.
	Subjects []string `json:"subjects"`
	// Severities to match (info, warning, critical); empty = all.
	Severities []string `json:"severities"`
	// Namespaces filters events that name a namespace (cleanup); events
	// without one match only when Include is empty.
	Namespaces Namespaces `json:"namespaces"`
	// Clusters to match, by the <cluster> token of the subject
	// (ops.<cluster>.…); empty = every cluster. Useful on a hub notifier
	// that reads a fleet (notifier.clusters).
	Clusters  []string `json:"clusters"`
	Receivers []string `json:"receivers"`
	// Title overrides the card title (the seed's msgtitle).
	Title string `json:"title"`
	// GroupWait and GroupInterval override the notifier's; 0 inherits.
	GroupWait     Duration `json:"groupWait"`
	GroupInterval Duration `json:"groupInterval"`
	Continue      bool     `json:"continue"`
}

// Notifier configures the fan-out of OPS results to chat receivers.
type Notifier struct {
	// Stream is the JetStream stream the receivers' consumers read: OPS
	// (default) on a cluster's own NATS, the fleet-wide stream on a hub.
	Stream string `json:"stream"`
	// Clusters selects whose OPS messages are delivered. Empty (default):
	// this cluster only (cluster.name, ops.<cluster>.>), as before fleets.
	// ["*"]: every cluster in Stream; [a, b]: those clusters (fleet mode:
	// cards, groups, outcomes, dead letters and delivered ids are per the
	// message's own cluster; docs/notifier.md#fleet-one-notifier-for-many-clusters).
	Clusters  []string   `json:"clusters"`
	Receivers []Receiver `json:"receivers"`
	Routes    []Route    `json:"routes"`
	// DefaultReceivers get what no route matched; empty drops it (acked, counted).
	DefaultReceivers []string `json:"defaultReceivers"`
	// GroupWait is how long the first message of a new group waits for
	// others; GroupInterval is the wait between later cards of a group.
	GroupWait     Duration `json:"groupWait"`
	GroupInterval Duration `json:"groupInterval"`
	// TopRows is how many rows a grouped card lists before "…and N more".
	TopRows int `json:"topRows"`
	// BodyLimit is the Feishu request body budget in bytes (Feishu: 20 KB).
	BodyLimit int `json:"bodyLimit"`
	// RequestTimeout bounds one HTTP request to a receiver; it must be
	// shorter than MaxSendTimeout(AckWait). Left out, it is
	// DefaultRequestTimeout or half of AckWait, whichever is shorter.
	RequestTimeout Duration `json:"requestTimeout"`
	// RetryInitial and RetryMax bound the exponential backoff between
	// attempts of one delivery; GiveUpAfter dead-letters a delivery that
	// kept failing with retryable errors for that long.
	RetryInitial Duration `json:"retryInitial"`
	RetryMax     Duration `json:"retryMax"`
	GiveUpAfter  Duration `json:"giveUpAfter"`
	// AckWait is the consumer's ack wait; held messages are kept alive with
	// progress acks, so this is how soon a crashed replica's messages are
	// redelivered to another one.
	AckWait Duration `json:"ackWait"`
	// MaxAckPending bounds messages held (grouping or retrying) at once.
	MaxAckPending int `json:"maxAckPending"`
	// MaxDeliver bounds redeliveries of one OPS message before it is dead-lettered.
	MaxDeliver int `json:"maxDeliver"`
	// DeliveredTTL is how long delivered ids are remembered to avoid duplicates.
	DeliveredTTL Duration `json:"deliveredTTL"`
	// DeadLetterMaxAge is how long the DLQ stream keeps dead letters.
	DeadLetterMaxAge Duration `json:"deadLetterMaxAge"`
	// Locale is the language of the cards: en or zh-CN. Empty: zh-CN when a
	// card title of the file is Chinese (the seed's msgtitle), else en
	// (NotifierLocale).
	Locale string `json:"locale"`
	// Timezone is the IANA name of the zone card times are shown in
	// (Asia/Shanghai); it defaults to the TZ environment variable, and to
	// UTC when that is unset.
	Timezone string `json:"timezone"`
}

// envTimezone is the TZ environment variable as a zone name (a leading
// ':' dropped, as the C library does).
func envTimezone() string { return strings.TrimPrefix(os.Getenv("TZ"), ":") }

// Location is the zone card times are shown in; UTC when Timezone is empty
// (or, which validation refuses, not a zone).
func (n *Notifier) Location() *time.Location {
	if l, err := time.LoadLocation(n.Timezone); err == nil {
		return l
	}
	return time.UTC
}

// NotifierLocale is the locale of cards without a receiver override, and
// why when the file did not say: notifier.locale when set; otherwise zh-CN
// when a title the cards use (the seed's msgtitles, a route's title) is
// Chinese, with a note naming it; otherwise en.
func (c *Config) NotifierLocale() (locale, note string) {
	if c.Notifier.Locale != "" {
		return c.Notifier.Locale, ""
	}
	titles := []struct{ field, title string }{
		{"sendReport.msgtitle", c.SendReport.MsgTitle}, {"delException.msgtitle", c.DelException.MsgTitle},
		{"imageAlert.msgtitle", c.ImageAlert.MsgTitle},
	}
	for i, r := range c.Notifier.Routes {
		titles = append(titles, struct{ field, title string }{"notifier.routes[" + itoa(i) + "].title", r.Title})
	}
	for _, t := range titles {
		if hasHan(t.title) {
			return LocaleZhCN, fmt.Sprintf("notifier.locale is not set and %s (%q) is Chinese: cards are in %s (set notifier.locale: en for English)",
				t.field, t.title, LocaleZhCN)
		}
	}
	return LocaleEN, ""
}

// ReceiverLocale is the locale of one receiver's cards.
func (c *Config) ReceiverLocale(r Receiver) string {
	if r.Locale != "" {
		return r.Locale
	}
	l, _ := c.NotifierLocale()
	return l
}

func hasHan(s string) bool {
	for _, r := range s {
		if unicode.Is(unicode.Han, r) {
			return true
		}
	}
	return false
}

// DefaultRequestTimeout is notifier.requestTimeout when the file leaves it
// and ackWait out.
const DefaultRequestTimeout = 10 * time.Second

// MaxSendTimeout is what a request timeout must stay under with ackWait:
// two thirds of it. A request still at the receiver when its message's ack
// wait runs out lets the server redeliver the message, after a lost lease to
// the next active replica, which sends the card again; and the progress
// acks that restart the ack wait go every ackWait/3 and stop when a term
// ends, so a request may start with only two thirds of ackWait left.
func MaxSendTimeout(ackWait time.Duration) time.Duration { return ackWait * 2 / 3 }

func (n *Notifier) setDefaults() {
	n.Stream = DefaultOpsStream
	n.GroupWait = D(5 * time.Second)
	n.GroupInterval = D(30 * time.Second)
	n.TopRows = 10
	n.BodyLimit = 20000
	n.RetryInitial = D(time.Second)
	n.RetryMax = D(time.Minute)
	n.GiveUpAfter = D(time.Hour)
	n.AckWait = D(30 * time.Second)
	n.MaxAckPending = 20000
	n.MaxDeliver = 20
	n.DeliveredTTL = D(24 * time.Hour)
	n.DeadLetterMaxAge = D(14 * 24 * time.Hour)
	n.Timezone = envTimezone()
}

// NotifierReceivers returns the configured receivers plus the implicit ones
// made from the seed's sendReport.apiurl and delException.apiurl. Types are
// defaulted and rates filled with Feishu's limits.
func (c *Config) NotifierReceivers() []Receiver {
	var out []Receiver
	if s := c.SendReport; s.APIURL.IsSet() {
		out = append(out, Receiver{Name: ImplicitReportReceiver, Type: ReceiverFeishu, URL: s.APIURL,
			Secret: s.Secret, SecretFile: s.SecretFile, SecretEnv: s.SecretEnv, Keyword: s.Keyword})
	}
	if d := c.DelException; d.APIURL.IsSet() {
		out = append(out, Receiver{Name: ImplicitCleanupReceiver, Type: ReceiverFeishu, URL: d.APIURL,
			Secret: d.Secret, SecretFile: d.SecretFile, SecretEnv: d.SecretEnv, Keyword: d.Keyword})
	}
	out = append(out, c.Notifier.Receivers...)
	for i := range out {
		r := &out[i]
		if r.Type == "" {
			r.Type = ReceiverFeishu
		}
		d := DefaultsFor(r.Type)
		if r.RatePerSecond == 0 {
			r.RatePerSecond = d.PerSecond
		}
		if r.RatePerMinute == 0 {
			r.RatePerMinute = d.PerMinute
		}
		if r.RatePerHour == 0 {
			r.RatePerHour = d.PerHour
		}
		if r.BodyLimit == 0 && r.Type != ReceiverFeishu && r.Type != ReceiverWebhook {
			r.BodyLimit = d.BodyLimit
		}
		if r.Timeout.Duration == 0 {
			r.Timeout = c.Notifier.RequestTimeout
		}
	}
	return out
}

// NotifierRoutes returns the implicit seed routes (first, with Continue so
// configured routes still apply) followed by the configured ones, with group
// timings inherited from the notifier section.
func (c *Config) NotifierRoutes() []Route {
	var out []Route
	if c.SendReport.APIURL.IsSet() {
		out = append(out,
			Route{Name: ImplicitReportReceiver, Subjects: []string{"ops.*.report.restarts"},
				Receivers: []string{ImplicitReportReceiver}, Title: c.SendReport.MsgTitle, Continue: true},
			Route{Name: ImplicitReportReceiver + "-images", Subjects: []string{"ops.*.report.images.>"},
				Receivers: []string{ImplicitReportReceiver}, Title: c.ImageAlert.MsgTitle, Continue: true})
	}
	if c.DelException.APIURL.IsSet() {
		out = append(out, Route{Name: ImplicitCleanupReceiver, Subjects: []string{"ops.*.cleanup.>"},
			Receivers: []string{ImplicitCleanupReceiver}, Title: c.DelException.MsgTitle, Continue: true})
	}
	out = append(out, c.Notifier.Routes...)
	for i := range out {
		r := &out[i]
		if r.Name == "" {
			r.Name = "route" + itoa(i)
		}
		if r.GroupWait.Duration == 0 {
			r.GroupWait = c.Notifier.GroupWait
		}
		if r.GroupInterval.Duration == 0 {
			r.GroupInterval = c.Notifier.GroupInterval
		}
	}
	return out
}

// validateSeedReceivers checks the signing settings the seed sections
// (sendReport, delException) give their implicit receivers: a seed user with
// a signed bot or keyword security needs no notifier section.
func (c *Config) validateSeedReceivers(errs *Errors) {
	for _, s := range []struct {
		p                           string
		url                         Secret
		secret                      Secret
		secretFile, secretEnv, word string
	}{
		{"sendReport", c.SendReport.APIURL, c.SendReport.Secret, c.SendReport.SecretFile, c.SendReport.SecretEnv, c.SendReport.Keyword},
		{"delException", c.DelException.APIURL, c.DelException.Secret, c.DelException.SecretFile, c.DelException.SecretEnv, c.DelException.Keyword},
	} {
		set := countSet(s.secret.IsSet(), s.secretFile != "", s.secretEnv != "")
		if set > 1 {
			errs.add(join(s.p, "secret"), "at most one of secret, secretFile or secretEnv may be set")
		}
		if !s.url.IsSet() && (set > 0 || s.word != "") {
			errs.add(join(s.p, "apiurl"), "must be set when secret or keyword is (they sign the apiurl's receiver)")
		}
	}
}

// DefaultRouteName is the name of the route of notifier.defaultReceivers.
const DefaultRouteName = "default"

// validateRouteNames refuses two routes of one name, over the routes the
// notifier runs (NotifierRoutes: the seed's implicit routes first, then the
// configured ones with their defaulted names route<i>). A route's name is
// its identity: in delivered-id keys, group keys, dead letters and the
// replay's lookup by name, so two of one name would merge their groups and
// records (an event both match listed twice in one card).
func (c *Config) validateRouteNames(errs *Errors) {
	routes := c.NotifierRoutes()
	seeds := len(routes) - len(c.Notifier.Routes)
	seen := map[string]bool{}
	if len(c.Notifier.DefaultReceivers) > 0 {
		seen[DefaultRouteName] = true
	}
	for i, r := range routes {
		if i >= seeds && seen[r.Name] {
			j := i - seeds
			rp := "notifier.routes[" + itoa(j) + "].name"
			switch {
			case c.Notifier.Routes[j].Name == "":
				errs.add(rp, "the default name %q is another route's; name this route", r.Name)
			case r.Name == DefaultRouteName && len(c.Notifier.DefaultReceivers) > 0:
				errs.add(rp, "%q is the route of defaultReceivers; choose another name", r.Name)
			case isRouteName(routes[:seeds], r.Name):
				errs.add(rp, "%q is a route made from the seed's apiurl; choose another name", r.Name)
			default:
				errs.add(rp, "duplicate route name %q (a route's name keys its groups, delivered records and dead letters)", r.Name)
			}
		}
		seen[r.Name] = true
	}
}

func isRouteName(routes []Route, name string) bool {
	for _, r := range routes {
		if r.Name == name {
			return true
		}
	}
	return false
}

// implicitReceiverNames are the receivers the seed keys create.
func (c *Config) implicitReceiverNames() []string {
	var names []string
	if c.SendReport.APIURL.IsSet() {
		names = append(names, ImplicitReportReceiver)
	}
	if c.DelException.APIURL.IsSet() {
		names = append(names, ImplicitCleanupReceiver)
	}
	return names
}

func (n *Notifier) validate(p string, errs *Errors, implicit ...string) {
	names := map[string]bool{}
	for _, name := range implicit {
		names[name] = true
	}
	for i, r := range n.Receivers {
		rp := p + ".receivers[" + itoa(i) + "]"
		switch {
		case r.Name == "":
			errs.add(rp+".name", "must not be empty")
		case !receiverName.MatchString(r.Name):
			errs.add(rp+".name", "%q may contain only letters, digits, '-' and '_'", r.Name)
		case names[r.Name] && (r.Name == ImplicitReportReceiver || r.Name == ImplicitCleanupReceiver):
			errs.add(rp+".name", "%q is the receiver made from the seed's apiurl; choose another name", r.Name)
		case names[r.Name]:
			errs.add(rp+".name", "duplicate receiver name %q", r.Name)
		}
		names[r.Name] = true
		if r.Type != "" && !contains(receiverTypes, r.Type) {
			errs.add(rp+".type", "must be one of %s, got %q", strings.Join(receiverTypes, ", "), r.Type)
		}
		if n := countSet(r.URL.IsSet(), r.URLFile != "", r.URLEnv != ""); n != 1 {
			errs.add(rp+".url", "exactly one of url, urlFile or urlEnv is required")
		}
		if countSet(r.Secret.IsSet(), r.SecretFile != "", r.SecretEnv != "") > 1 {
			errs.add(rp+".secret", "at most one of secret, secretFile or secretEnv may be set")
		}
		if r.Type != "" && r.Type != ReceiverFeishu && r.Type != ReceiverDingTalk {
			if r.Keyword != "" {
				errs.add(rp+".keyword", "only feishu and dingtalk receivers use a keyword")
			}
			if countSet(r.Secret.IsSet(), r.SecretFile != "", r.SecretEnv != "") > 0 {
				errs.add(rp+".secret", "%s receivers do not sign their requests (the URL is the secret); only feishu and dingtalk take a secret", r.Type)
			}
		}
		if r.RatePerHour < 0 {
			errs.add(rp+".ratePerHour", "must not be negative")
		}
		if r.BodyLimit != 0 && (r.Type == "" || r.Type == ReceiverFeishu || r.Type == ReceiverWebhook) {
			errs.add(rp+".bodyLimit", "only dingtalk, wecom, slack and teams receivers take a bodyLimit (feishu: notifier.bodyLimit)")
		} else if r.BodyLimit < 0 || (r.BodyLimit > 0 && r.BodyLimit < 1024) {
			errs.add(rp+".bodyLimit", "must be 0 (the type's default) or at least 1024 bytes")
		}
		if r.RatePerSecond < 0 {
			errs.add(rp+".ratePerSecond", "must not be negative")
		}
		if r.RatePerMinute < 0 {
			errs.add(rp+".ratePerMinute", "must not be negative")
		}
		if r.Timeout.Duration < 0 {
			errs.add(rp+".timeout", "must not be negative")
		}
		if r.Locale != "" && !contains(locales, r.Locale) {
			errs.add(rp+".locale", "must be one of %s (or empty for notifier.locale), got %q", strings.Join(locales, ", "), r.Locale)
		}
	}
	for i, rt := range n.Routes {
		rp := p + ".routes[" + itoa(i) + "]"
		if len(rt.Receivers) == 0 {
			errs.add(rp+".receivers", "must name at least one receiver")
		}
		for _, r := range rt.Receivers {
			if !names[r] {
				errs.add(rp+".receivers", "unknown receiver %q", r)
			}
		}
		for _, s := range rt.Subjects {
			if msg := checkSubjectPattern(s); msg != "" {
				errs.add(rp+".subjects", "%q: %s", s, msg)
			}
		}
		for _, s := range rt.Severities {
			if s != "info" && s != "warning" && s != "critical" {
				errs.add(rp+".severities", "must be info, warning or critical, got %q", s)
			}
		}
		if rt.GroupWait.Duration < 0 {
			errs.add(rp+".groupWait", "must not be negative")
		}
		if rt.GroupInterval.Duration < 0 {
			errs.add(rp+".groupInterval", "must not be negative")
		}
		n.validateRouteClusters(rp+".clusters", rt.Clusters, errs)
	}
	n.validateFleet(p, errs)
	n.validateReceiverLists(p, errs)
	for _, r := range n.DefaultReceivers {
		if !names[r] {
			errs.add(p+".defaultReceivers", "unknown receiver %q", r)
		}
	}
	positive := []struct {
		name string
		d    time.Duration
	}{
		{"groupWait", n.GroupWait.Duration}, {"groupInterval", n.GroupInterval.Duration},
		{"requestTimeout", n.RequestTimeout.Duration}, {"retryInitial", n.RetryInitial.Duration},
		{"retryMax", n.RetryMax.Duration}, {"giveUpAfter", n.GiveUpAfter.Duration},
		{"ackWait", n.AckWait.Duration}, {"deliveredTTL", n.DeliveredTTL.Duration},
		{"deadLetterMaxAge", n.DeadLetterMaxAge.Duration},
	}
	for _, f := range positive {
		if f.d <= 0 {
			errs.add(join(p, f.name), "must be positive")
		}
	}
	if n.RetryMax.Duration < n.RetryInitial.Duration {
		errs.add(join(p, "retryMax"), "must not be less than retryInitial")
	}
	if n.AckWait.Duration > 0 && n.AckWait.Duration < time.Second {
		errs.add(join(p, "ackWait"), "must be at least 1s")
	} else {
		n.validateSendTimeouts(p, errs)
	}
	if n.TopRows < 1 {
		errs.add(join(p, "topRows"), "must be at least 1")
	}
	if n.BodyLimit < 4096 {
		errs.add(join(p, "bodyLimit"), "must be at least 4096 bytes")
	}
	if n.MaxAckPending < 1 {
		errs.add(join(p, "maxAckPending"), "must be at least 1")
	}
	if n.MaxDeliver < 1 {
		errs.add(join(p, "maxDeliver"), "must be at least 1")
	}
	if n.Locale != "" && !contains(locales, n.Locale) {
		errs.add(join(p, "locale"), "must be one of %s (or empty: zh-CN when the titles are Chinese, else en), got %q", strings.Join(locales, ", "), n.Locale)
	}
	n.validateTimezone(p, errs)
}

// validateTimezone refuses a zone name the time zone database lacks.
func (n *Notifier) validateTimezone(p string, errs *Errors) {
	if _, err := time.LoadLocation(n.Timezone); err == nil && !strings.EqualFold(n.Timezone, "Local") {
		return
	}
	from := ""
	if n.Timezone == envTimezone() {
		from = " (taken from the TZ environment variable, which it defaults to)"
	}
	errs.add(join(p, "timezone"), "%q is not an IANA time zone name such as Asia/Shanghai or UTC%s", n.Timezone, from)
}

// deriveDefaults fills what the file left out and other settings decide:
// a request timeout under MaxSendTimeout of the ackWait read.
func (n *Notifier) deriveDefaults() {
	if n.RequestTimeout.Duration == 0 {
		n.RequestTimeout = D(min(DefaultRequestTimeout, n.AckWait.Duration/2))
	}
}

// validateSendTimeouts refuses a request timeout that can outlast its
// message's ack wait: a request still at the receiver when the ack wait ends
// (after a lost lease) has the message redelivered to the next active
// replica, which sends the card again.
func (n *Notifier) validateSendTimeouts(p string, errs *Errors) {
	limit := MaxSendTimeout(n.AckWait.Duration)
	if limit <= 0 {
		return
	}
	check := func(field string, d time.Duration) {
		if d >= limit {
			errs.add(field, "%v is not less than two thirds of notifier.ackWait (%v, so under %v): a request still at "+
				"the receiver when its message's ack wait ends (after a lost lease) has the message redelivered to the "+
				"next active replica, which sends the card again; lower the timeout or raise notifier.ackWait",
				d, n.AckWait.Duration, limit)
		}
	}
	check(join(p, "requestTimeout"), n.RequestTimeout.Duration)
	for i, r := range n.Receivers {
		check(p+".receivers["+itoa(i)+"].timeout", r.Timeout.Duration)
	}
}

// validateReceiverLists refuses a receiver listed twice in one route or in
// defaultReceivers: (route, receiver) is the identity of a card, a delivered
// record and a dead letter, so the receiver would get every event twice.
func (n *Notifier) validateReceiverLists(p string, errs *Errors) {
	for i, rt := range n.Routes {
		if r := listedTwice(rt.Receivers); r != "" {
			rp := p + ".routes[" + itoa(i) + "].receivers"
			if rt.Name != "" {
				errs.add(rp, "receiver %q is listed twice in route %q (it would get every event twice)", r, rt.Name)
			} else {
				errs.add(rp, "receiver %q is listed twice (it would get every event twice)", r)
			}
		}
	}
	if r := listedTwice(n.DefaultReceivers); r != "" {
		errs.add(p+".defaultReceivers", "receiver %q is listed twice (it would get every event twice)", r)
	}
}

// listedTwice returns the first name names has more than once, or "".
func listedTwice(names []string) string {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

func countSet(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// checkSubjectPattern returns why a NATS subject filter is invalid, or "".
func checkSubjectPattern(s string) string {
	if s == "" {
		return "must not be empty"
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return "empty token"
		case t == ">" && i != len(toks)-1:
			return "'>' must be the last token"
		case strings.ContainsAny(t, " \t") || (len(t) > 1 && strings.ContainsAny(t, "*>")):
			return "wildcards must be whole tokens and spaces are not allowed"
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

package config

import "time"

// Receiver types.
const (
	ReceiverFeishu  = "feishu"
	ReceiverWebhook = "webhook"
)

// Receiver is one destination. URL and Secret may each come from the file,
// from a file path, or from an environment variable (a Kubernetes Secret).
type Receiver struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	URL        Secret `json:"url"`
	URLFile    string `json:"urlFile"`
	URLEnv     string `json:"urlEnv"`
	Secret     Secret `json:"secret"`
	SecretFile string `json:"secretFile"`
	SecretEnv  string `json:"secretEnv"`
	// Keyword is prepended to titles for bots with keyword security.
	Keyword string `json:"keyword"`
	// RatePerSecond and RatePerMinute default to Feishu's 5/s and 100/min.
	RatePerSecond int `json:"ratePerSecond"`
	RatePerMinute int `json:"ratePerMinute"`
}

// Route sends matching OPS messages to receivers. A message goes to every
// matching route unless one with Continue=false matched first.
type Route struct {
	Name string `json:"name"`
	// Subjects are NATS subject patterns (wildcards allowed); empty = all.
	Subjects []string `json:"subjects"`
	// Severities to match; empty = all.
	Severities []string   `json:"severities"`
	Namespaces Namespaces `json:"namespaces"`
	Receivers  []string   `json:"receivers"`
	// Title overrides the card title (the seed's msgtitle).
	Title         string   `json:"title"`
	GroupWait     Duration `json:"groupWait"`
	GroupInterval Duration `json:"groupInterval"`
	Continue      bool     `json:"continue"`
}

// Notifier configures the Feishu fan-out.
type Notifier struct {
	Receivers []Receiver `json:"receivers"`
	Routes    []Route    `json:"routes"`
	// DefaultReceivers get what no route matched; empty drops it (acked, counted).
	DefaultReceivers []string `json:"defaultReceivers"`
	GroupWait        Duration `json:"groupWait"`
	GroupInterval    Duration `json:"groupInterval"`
	// MaxDeliver bounds redeliveries of one OPS message before it is dead-lettered.
	MaxDeliver int `json:"maxDeliver"`
	// DeliveredTTL is how long delivered ids are remembered to avoid duplicates.
	DeliveredTTL Duration `json:"deliveredTTL"`
}

func (n *Notifier) setDefaults() {
	n.GroupWait = D(5 * time.Second)
	n.GroupInterval = D(30 * time.Second)
	n.MaxDeliver = 20
	n.DeliveredTTL = D(24 * time.Hour)
}

func (n *Notifier) validate(p string, errs *Errors) {
	names := map[string]bool{}
	for i, r := range n.Receivers {
		rp := p + ".receivers[" + itoa(i) + "]"
		switch {
		case r.Name == "":
			errs.add(rp+".name", "must not be empty")
		case names[r.Name]:
			errs.add(rp+".name", "duplicate receiver name %q", r.Name)
		}
		names[r.Name] = true
		if r.Type != ReceiverFeishu && r.Type != ReceiverWebhook {
			errs.add(rp+".type", "must be %q or %q, got %q", ReceiverFeishu, ReceiverWebhook, r.Type)
		}
		if !r.URL.IsSet() && r.URLFile == "" && r.URLEnv == "" {
			errs.add(rp+".url", "one of url, urlFile or urlEnv is required")
		}
		if r.RatePerSecond < 0 || r.RatePerMinute < 0 {
			errs.add(rp+".ratePerSecond", "rates must not be negative")
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
	}
	for _, r := range n.DefaultReceivers {
		if !names[r] {
			errs.add(p+".defaultReceivers", "unknown receiver %q", r)
		}
	}
	if n.GroupWait.Duration < 0 || n.GroupInterval.Duration < 0 {
		errs.add(p+".groupWait", "must not be negative")
	}
	if n.MaxDeliver < 1 {
		errs.add(p+".maxDeliver", "must be at least 1")
	}
}

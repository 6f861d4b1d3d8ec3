package config

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration that reads "90s", "1m", "1h30m" or a bare
// number of seconds (the seed writes `controllerResyncPeriod: 10`).
type Duration struct{ time.Duration }

// D is a convenience constructor.
func D(d time.Duration) Duration { return Duration{d} }

func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(unq)
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		d.Duration = time.Duration(f * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q (use e.g. 30s, 1m, 2h or a number of seconds)", s)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Secret holds a credential (webhook URL, signing secret). It never prints or
// marshals its value, so a logged config or error cannot leak it.
type Secret string

// Value returns the secret itself; call it only where the secret is used.
func (s Secret) Value() string { return string(s) }

// IsSet reports whether the secret has a value.
func (s Secret) IsSet() bool { return s != "" }

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<redacted>"
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return s.String() }

func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// ResolveSecret returns the first of value, the contents of file, or the
// environment variable env that is set. Errors name the file or variable,
// never the value.
func ResolveSecret(value Secret, file, env string) (Secret, error) {
	if value.IsSet() {
		return value, nil
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read secret file %s: %w", file, err)
		}
		return Secret(strings.TrimSpace(string(b))), nil
	}
	if env != "" {
		v, ok := os.LookupEnv(env)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", env)
		}
		return Secret(strings.TrimSpace(v)), nil
	}
	return "", nil
}

// Namespaces selects namespaces by include and exclude lists. An empty include
// list means every namespace; exclude wins over include.
type Namespaces struct {
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// Allows reports whether a namespace passes the filter.
func (n Namespaces) Allows(ns string) bool {
	for _, x := range n.Exclude {
		if x == ns {
			return false
		}
	}
	if len(n.Include) == 0 {
		return true
	}
	for _, x := range n.Include {
		if x == ns {
			return true
		}
	}
	return false
}

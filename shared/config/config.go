// Package config is the one configuration file every opswire service reads
// (DESIGN §7). Each service reads its own section; all sections are typed,
// defaulted and validated here so that a mistake is reported once, with the
// path of the bad field, before any service acts on a cluster.
//
// The seed's config.yml loads unchanged with the same meaning: keys match
// case-insensitively (the seed mixes `leaseLockName` and `LeaderElect`),
// durations accept "1m" as well as bare seconds, and every new setting has a
// safe default. Unknown keys are errors, because a misspelt safety setting
// silently ignored is worse than a service that refuses to start.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// Config is the whole file.
type Config struct {
	Cluster    Cluster    `json:"cluster"`
	Controller Controller `json:"controller"`
	Kube       Kube       `json:"kube"`
	NATS       NATS       `json:"nats"`
	Watcher    Watcher    `json:"watcher"`
	// AutoCordon is the cordon actor (seed key).
	AutoCordon AutoCordon `json:"autoCordon"`
	// DelException is the cleanup actor (seed key).
	DelException DelException `json:"delException"`
	// SendReport is the report actor's restart report (seed key).
	SendReport SendReport `json:"sendReport"`
	// ImageAlert is the report actor's image-storage alert (seed 003).
	ImageAlert ImageAlert `json:"imageAlert"`
	Notifier   Notifier   `json:"notifier"`
}

// Cluster names the cluster in every subject.
type Cluster struct {
	Name string `json:"name"`
}

// ClusterKey is a cluster name as one token of a NATS KV key. A subject
// token takes the name as it is (any character but '.', '*', '>' and
// whitespace: an EKS ARN, a Chinese name), but nats.go refuses every KV key
// outside [-/_=.a-zA-Z0-9], so such a name built into a key as it is would
// make every KV call fail. Any other byte is written =XX, the upper-case hex
// of the UTF-8 byte, and so is a '=' that would read as such an escape. The
// mapping is one to one (clusters sharing a bucket never share a key) and
// gives no '.' (one token). A name that is a valid key already keeps it,
// unless it holds '=' followed by two upper-case hex digits, so upgrading
// keeps the stored state and the leases of existing clusters.
func ClusterKey(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case keyByte(c), c == '=' && !(i+2 < len(name) && isUpperHex(name[i+1]) && isUpperHex(name[i+2])):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

// ClusterToken is a cluster name as part of a NATS consumer or stream name:
// ClusterKey with '/' (an EKS ARN's), which such names refuse, written =2F
// as well. It is one to one too: ClusterKey never writes "=2F" (it keeps
// '/'), and a name's own "=2F" reads as an escape there and is escaped.
func ClusterToken(name string) string { return strings.ReplaceAll(ClusterKey(name), "/", "=2F") }

// keyByte reports whether c stands for itself in a ClusterKey.
func keyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '/'
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

// Load reads, defaults and validates a configuration file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(data)
}

// Parse decodes, defaults and validates a configuration document. The
// returned error is an Errors value when fields are wrong.
func Parse(data []byte) (*Config, error) {
	c := defaults()
	if len(bytes.TrimSpace(data)) > 0 {
		jsonDoc, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, Errors{{Field: "(file)", Msg: "not valid YAML: " + err.Error()}}
		}
		var raw any
		if err := json.Unmarshal(jsonDoc, &raw); err != nil {
			return nil, Errors{{Field: "(file)", Msg: err.Error()}}
		}
		if raw != nil {
			if _, ok := raw.(map[string]any); !ok {
				return nil, Errors{{Field: "(file)", Msg: "the top level must be a mapping of sections"}}
			}
			var errs Errors
			raw = canonicalize(raw, reflect.TypeOf(c).Elem(), "", &errs)
			canon, _ := json.Marshal(raw)
			dec := json.NewDecoder(bytes.NewReader(canon))
			dec.DisallowUnknownFields()
			if err := dec.Decode(c); err != nil {
				if len(errs) > 0 {
					return nil, errs // the decoder tripped over a value already named
				}
				return nil, decodeError(err)
			}
			c.Notifier.deriveDefaults()
			if len(errs) > 0 {
				// Unknown keys were left out; report what is wrong with the
				// rest too, so one run names every bad field.
				var verrs Errors
				if errors.As(c.Validate(), &verrs) {
					errs = append(errs, verrs...)
				}
				return nil, errs
			}
		}
	}
	c.Notifier.deriveDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return Errors{{Field: te.Field, Msg: fmt.Sprintf("wrong type: got %s, want %s", te.Value, te.Type)}}
	}
	// Custom unmarshalers (durations) report without a field; name it by message.
	return Errors{{Field: "(value)", Msg: err.Error()}}
}

// Default is the configuration used when the file leaves a setting out.
func Default() *Config {
	c := defaults()
	c.Notifier.deriveDefaults()
	return c
}

// defaults are the settings that do not depend on others: what a file is
// decoded onto before the derived ones (deriveDefaults) are filled.
func defaults() *Config {
	c := &Config{Cluster: Cluster{Name: "default"}}
	c.Controller.setDefaults()
	c.Kube.setDefaults()
	c.NATS.setDefaults()
	c.Watcher.setDefaults()
	c.AutoCordon.setDefaults()
	c.DelException.setDefaults()
	c.SendReport.setDefaults()
	c.ImageAlert.setDefaults()
	c.Notifier.setDefaults()
	return c
}

// Validate returns every problem found, each naming its field.
func (c *Config) Validate() error {
	var errs Errors
	if p := clusterTokenProblem(c.Cluster.Name); p != "" {
		errs.add("cluster.name", "%q %s", c.Cluster.Name, p)
	}
	c.Controller.validate("controller", &errs)
	c.Kube.validate("kube", &errs)
	c.NATS.validate("nats", &errs)
	c.Watcher.validate("watcher", &errs)
	c.AutoCordon.validate("autoCordon", &errs)
	c.DelException.validate("delException", &errs)
	c.SendReport.validate("sendReport", &errs)
	c.SendReport.validateWindows("sendReport", c.NATS, &errs)
	c.ImageAlert.validate("imageAlert", &errs)
	c.Notifier.validate("notifier", &errs, c.implicitReceiverNames()...)
	c.validateSeedReceivers(&errs)
	c.validateRouteNames(&errs)
	if len(errs) > 0 {
		return errs
	}
	return nil
}

package config

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// kvKey is what nats.go accepts as a KV key (jetstream validKeyRe); a
// cluster's key token must also hold no '.', which separates key tokens.
var kvKey = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)

// unescapeClusterKey reverses ClusterKey: "=XX" (upper-case hex) is one
// byte, any other '=' is itself.
func unescapeClusterKey(k string) string {
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		if k[i] == '=' && i+2 < len(k) && isUpperHex(k[i+1]) && isUpperHex(k[i+2]) {
			b.WriteByte(unhex(k[i+1])<<4 | unhex(k[i+2]))
			i += 2
			continue
		}
		b.WriteByte(k[i])
	}
	return b.String()
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// TestClusterNames: any name that is one NATS subject token is accepted,
// whatever its script (EKS ARNs, Chinese names), and gets a KV key token
// that nats.go accepts; names a key allowed as they are keep them, so an
// upgrade keeps a cluster's stored state and lease.
func TestClusterNames(t *testing.T) {
	tests := []struct {
		name    string
		cluster string
		key     string // "" when the name is refused
	}{
		{"plain", "prod", "prod"},
		{"dash, underscore and slash as they were", "team-a/prod_1", "team-a/prod_1"},
		{"colon", "eu:prod", "eu=3Aprod"},
		{"EKS ARN", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", "arn=3Aaws=3Aeks=3Aeu-west-1=3A123456789012=3Acluster/prod"},
		{"Chinese", "北京生产", "=E5=8C=97=E4=BA=AC=E7=94=9F=E4=BA=A7"},
		{"'=' that reads as no escape stays", "a=b", "a=b"},
		{"'=' that would read as an escape is escaped", "eu=3Aprod", "eu=3D3Aprod"},
		{"dot", "a.b", ""},
		{"wildcard", "a*", ""},
		{"full wildcard", ">", ""},
		{"space", "a b", ""},
		{"tab", "a\tb", ""},
		{"newline", "a\nb", ""},
		{"carriage return", "a\rb", ""},
		{"form feed", "a\fb", ""},
		{"NUL", "a\x00b", ""},
		{"not UTF-8", "a\xffb", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			c.Cluster.Name = tc.cluster
			err := c.Validate()
			if tc.key == "" {
				var errs Errors
				if !errors.As(err, &errs) || errs[0].Field != "cluster.name" {
					t.Fatalf("cluster.name %q: Validate = %v, want an error naming cluster.name", tc.cluster, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("cluster.name %q refused: %v", tc.cluster, err)
			}
			if got := ClusterKey(tc.cluster); got != tc.key {
				t.Fatalf("ClusterKey(%q) = %q, want %q", tc.cluster, got, tc.key)
			}
		})
	}
}

// FuzzClusterKey: every name gets a valid key token, and no two names the
// same one (two clusters sharing a bucket never read each other's keys).
func FuzzClusterKey(f *testing.F) {
	for _, s := range []string{"prod", "eu:prod", "eu=3Aprod", "=", "==", "=3", "=3D", "a=", "北京生产", "\xff", "=:", "=A:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" {
			return
		}
		k := ClusterKey(name)
		if !kvKey.MatchString(k) {
			t.Fatalf("ClusterKey(%q) = %q: not a KV key token", name, k)
		}
		if back := unescapeClusterKey(k); back != name {
			t.Fatalf("ClusterKey(%q) = %q, which reads back as %q", name, k, back)
		}
	})
}

// TestClusterTokenIsAConsumerName: every cluster name a subject token may
// be becomes a token nats.go accepts in a consumer name (no '/', '.', '*',
// '>', whitespace), one to one.
func TestClusterTokenIsAConsumerName(t *testing.T) {
	names := []string{"prod", "eu:prod", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", "北京生产", "a=2Fb", "a/b", "a=3Ab"}
	seen := map[string]string{}
	for _, n := range names {
		tok := ClusterToken(n)
		if strings.ContainsAny(tok, "/.*> \t") {
			t.Errorf("ClusterToken(%q) = %q: not a consumer-name token", n, tok)
		}
		if prev, dup := seen[tok]; dup {
			t.Errorf("ClusterToken(%q) = ClusterToken(%q) = %q", n, prev, tok)
		}
		seen[tok] = n
	}
	if got := ClusterToken("prod"); got != "prod" {
		t.Errorf("ClusterToken(prod) = %q: a safe name must keep its consumer", got)
	}
}

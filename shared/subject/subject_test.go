package subject

import (
	"strings"
	"testing"
)

func TestBuildAndParse(t *testing.T) {
	tests := []struct {
		name string
		ref  Ref
		want string
	}{
		{"node", Ref{Cluster: "prod", Kind: KindNode, Name: "ip-10-0-1-2.ec2.internal"}, "kube.prod.node.ip-10-0-1-2_ec2_internal"},
		{"pod", Ref{Cluster: "default", Kind: KindPod, Namespace: "kube-system", Name: "coredns-1.2"}, "kube.default.pod.kube-system.coredns-1_2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.ref.Subject()
			if got != tc.want {
				t.Fatalf("Subject() = %q, want %q", got, tc.want)
			}
			back, err := ParseKube(got)
			if err != nil {
				t.Fatal(err)
			}
			if back != tc.ref {
				t.Fatalf("ParseKube(%q) = %+v, want %+v", got, back, tc.ref)
			}
		})
	}
}

func TestParseKubeRejects(t *testing.T) {
	for _, s := range []string{"", "kube", "kube.a.node", "ops.a.node.b", "kube.a.pod.ns", "kube.a.node.b.c", "kube.a.svc.b", "kube..node.x"} {
		if _, err := ParseKube(s); err == nil {
			t.Errorf("ParseKube(%q) succeeded, want error", s)
		}
	}
}

func TestOpsEncodesTokens(t *testing.T) {
	got := Ops("prod", "cleanup", "deleted", "my.ns", "pod.1")
	if want := "ops.prod.cleanup.deleted.my_ns.pod_1"; got != want {
		t.Fatalf("Ops() = %q, want %q", got, want)
	}
}

// FuzzRoundTrip checks that every valid Kubernetes name survives the
// subject encoding and always forms exactly one token.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"a", "a.b", "node-1.example.com", "x..y", "0"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, ns, name string) {
		if !validName(ns) || !validName(name) {
			t.Skip()
		}
		subj := Pod("c", ns, name)
		if n := strings.Count(subj, "."); n != 4 {
			t.Fatalf("Pod(%q,%q) = %q has %d dots, want 4", ns, name, subj, n)
		}
		ref, err := ParseKube(subj)
		if err != nil {
			t.Fatal(err)
		}
		if ref.Namespace != ns || ref.Name != name {
			t.Fatalf("round trip %q/%q -> %q -> %q/%q", ns, name, subj, ref.Namespace, ref.Name)
		}
	})
}

// validName approximates a DNS-1123 subdomain: lowercase alphanumerics, '-' and '.'.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

// Package subject builds and parses the NATS subjects of DESIGN §2.
//
// Kubernetes names may contain '.', which separates NATS subject tokens, and
// never contain '_'. Every name token is therefore encoded with '.'→'_', which
// keeps the mapping reversible and makes one name exactly one token, so the
// '*' wildcard always matches one object.
package subject

import (
	"fmt"
	"strings"
)

// Stream names and their subject filters (DESIGN §3).
const (
	KubeStream = "KUBE"
	OpsStream  = "OPS"
)

// Kind of object mirrored in the KUBE stream.
type Kind string

const (
	KindNode Kind = "node"
	KindPod  Kind = "pod"
)

// Encode turns a Kubernetes name into a single subject token.
func Encode(name string) string { return strings.ReplaceAll(name, ".", "_") }

// Decode reverses Encode.
func Decode(token string) string { return strings.ReplaceAll(token, "_", ".") }

// Node is kube.<cluster>.node.<node>.
func Node(cluster, node string) string {
	return "kube." + Encode(cluster) + ".node." + Encode(node)
}

// Pod is kube.<cluster>.pod.<namespace>.<pod>.
func Pod(cluster, namespace, pod string) string {
	return "kube." + Encode(cluster) + ".pod." + Encode(namespace) + "." + Encode(pod)
}

// Kube is the filter for all state of one cluster: kube.<cluster>.>.
func Kube(cluster string) string { return "kube." + Encode(cluster) + ".>" }

// KubeKind is the filter for all objects of one kind: kube.<cluster>.<kind>.>.
func KubeKind(cluster string, kind Kind) string {
	return "kube." + Encode(cluster) + "." + string(kind) + ".>"
}

// Ops builds ops.<cluster>.<actor>.<tokens...>, encoding every token.
func Ops(cluster, actor string, tokens ...string) string {
	var b strings.Builder
	b.WriteString("ops.")
	b.WriteString(Encode(cluster))
	b.WriteByte('.')
	b.WriteString(actor)
	for _, t := range tokens {
		b.WriteByte('.')
		b.WriteString(Encode(t))
	}
	return b.String()
}

// Notify is notify.<cluster>.<receiver>.<outcome>.
func Notify(cluster, receiver, outcome string) string {
	return "notify." + Encode(cluster) + "." + Encode(receiver) + "." + outcome
}

// Ctl is ctl.<cluster>.<service>.<command>.
func Ctl(cluster, service, command string) string {
	return "ctl." + Encode(cluster) + "." + service + "." + command
}

// Ref identifies the object a KUBE subject names.
type Ref struct {
	Cluster   string
	Kind      Kind
	Namespace string // empty for nodes
	Name      string
}

// String renders the ref as <kind>/<namespace>/<name> (namespace omitted for nodes).
func (r Ref) String() string {
	if r.Namespace == "" {
		return string(r.Kind) + "/" + r.Name
	}
	return string(r.Kind) + "/" + r.Namespace + "/" + r.Name
}

// Subject renders the KUBE subject of the ref.
func (r Ref) Subject() string {
	if r.Kind == KindNode {
		return Node(r.Cluster, r.Name)
	}
	return Pod(r.Cluster, r.Namespace, r.Name)
}

// ParseKube parses a kube.* subject into the object it names.
func ParseKube(subj string) (Ref, error) {
	// Every KUBE message is parsed (155,000 when a leader loads the
	// state): the tokens go to an array, not a slice of strings.Split.
	var buf [6]string
	t := buf[:0]
	for rest := subj; ; {
		tok, after, more := strings.Cut(rest, ".")
		if len(t) == len(buf) { // too many tokens for any kind: only the count matters now
			t = append(t, tok)
			break
		}
		t = append(t, tok)
		if !more {
			break
		}
		rest = after
	}
	if len(t) < 4 || t[0] != "kube" {
		return Ref{}, fmt.Errorf("subject %q: not a kube.<cluster>.<kind>... subject", subj)
	}
	ref := Ref{Cluster: Decode(t[1]), Kind: Kind(t[2])}
	switch {
	case ref.Kind == KindNode && len(t) == 4:
		ref.Name = Decode(t[3])
	case ref.Kind == KindPod && len(t) == 5:
		ref.Namespace, ref.Name = Decode(t[3]), Decode(t[4])
	default:
		return Ref{}, fmt.Errorf("subject %q: unknown kind or wrong number of tokens", subj)
	}
	for _, tok := range t[1:] {
		if tok == "" {
			return Ref{}, fmt.Errorf("subject %q: empty token", subj)
		}
	}
	return ref, nil
}

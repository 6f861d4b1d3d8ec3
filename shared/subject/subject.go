// Package subject builds and parses the NATS subjects of DESIGN §2.
//
// Kubernetes names may contain '.', which separates NATS subject tokens, and
// never contain '_'. Every name token is therefore encoded with '.'→'_', which
// keeps the mapping reversible and makes one name exactly one token, so the
// '*' wildcard always matches one object.
package subject

import (
	"errors"
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

// ErrUnknownKind is ParseKube's error for a KUBE subject of a kind other
// than node and pod (a newer watcher's, say).
var ErrUnknownKind = errors.New("unknown kind")

// ParseKube parses a kube.* subject into the object it names.
func ParseKube(subj string) (Ref, error) {
	// Every KUBE message is parsed (155,000 when a leader loads the
	// state): one pass over the bytes finds the dots (a kind has 5 tokens
	// at most, so 5 dots say "too many") and the tokens holding '_', the
	// only ones Decode has work for.
	var dot [5]int
	n, under := 0, uint(0) // dots found; bit i: token i holds '_'
	for i := 0; i < len(subj) && n < len(dot); i++ {
		switch subj[i] {
		case '.':
			dot[n] = i
			n++
		case '_':
			under |= 1 << n
		}
	}
	if n < 3 || subj[:dot[0]] != "kube" {
		return Ref{}, fmt.Errorf("subject %q: not a kube.<cluster>.<kind>... subject", subj)
	}
	tokens := n + 1 // 6 when there are more
	end := len(subj)
	if tokens > 5 {
		end = dot[5-1]
	}
	// tok is token i (1 ≤ i < tokens, i ≤ 4).
	tok := func(i int) string {
		if i < n {
			return subj[dot[i-1]+1 : dot[i]]
		}
		return subj[dot[i-1]+1 : end]
	}
	decode := func(i int) string {
		if under&(1<<i) == 0 {
			return tok(i)
		}
		return Decode(tok(i))
	}
	ref := Ref{Cluster: decode(1), Kind: Kind(tok(2))}
	switch {
	case ref.Kind == KindNode && tokens == 4:
		ref.Name = decode(3)
	case ref.Kind == KindPod && tokens == 5:
		ref.Namespace, ref.Name = decode(3), decode(4)
	case ref.Kind != KindNode && ref.Kind != KindPod:
		return Ref{}, fmt.Errorf("subject %q: %w", subj, ErrUnknownKind)
	default:
		return Ref{}, fmt.Errorf("subject %q: wrong number of tokens", subj)
	}
	for i := 1; i < tokens; i++ {
		if tok(i) == "" {
			return Ref{}, fmt.Errorf("subject %q: empty token", subj)
		}
	}
	return ref, nil
}

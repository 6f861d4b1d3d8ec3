package subject

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// parseKubeSplit is ParseKube as it was written first, with strings.Split:
// the array-based parser must agree with it on every input.
func parseKubeSplit(subj string) (Ref, error) {
	t := strings.Split(subj, ".")
	if len(t) < 4 || t[0] != "kube" {
		return Ref{}, fmt.Errorf("subject %q: not a kube.<cluster>.<kind>... subject", subj)
	}
	ref := Ref{Cluster: Decode(t[1]), Kind: Kind(t[2])}
	switch {
	case ref.Kind == KindNode && len(t) == 4:
		ref.Name = Decode(t[3])
	case ref.Kind == KindPod && len(t) == 5:
		ref.Namespace, ref.Name = Decode(t[3]), Decode(t[4])
	case ref.Kind != KindNode && ref.Kind != KindPod:
		return Ref{}, fmt.Errorf("subject %q: %w", subj, ErrUnknownKind)
	default:
		return Ref{}, fmt.Errorf("subject %q: wrong number of tokens", subj)
	}
	for _, tok := range t[1:] {
		if tok == "" {
			return Ref{}, fmt.Errorf("subject %q: empty token", subj)
		}
	}
	return ref, nil
}

// FuzzParseKube: every subject the mirrors receive goes through ParseKube.
// It must never panic, and a subject it accepts must be exactly the one its
// Ref builds again (one object, one subject).
func FuzzParseKube(f *testing.F) {
	for _, s := range []string{"kube.prod.pod.ns.p", "kube.prod.node.n_1", "kube.a.pod..x", "kube.a.svc.x", "ops.a.b", "kube",
		"kube.a.pod.b.c.d", "kube.a.pod.b.c.d.e.f.g", "kube.a.node.", ".kube.a.node.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		ref, err := ParseKube(subj)
		wantRef, wantErr := parseKubeSplit(subj)
		if !reflect.DeepEqual(ref, wantRef) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Fatalf("ParseKube(%q) = %+v, %v; strings.Split version: %+v, %v", subj, ref, err, wantRef, wantErr)
		}
		if err != nil {
			return
		}
		if got := ref.Subject(); got != subj {
			t.Fatalf("ParseKube(%q) = %+v, whose subject is %q", subj, ref, got)
		}
	})
}

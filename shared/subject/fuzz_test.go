package subject

import "testing"

// FuzzParseKube: every subject the mirrors receive goes through ParseKube.
// It must never panic, and a subject it accepts must be exactly the one its
// Ref builds again (one object, one subject).
func FuzzParseKube(f *testing.F) {
	for _, s := range []string{"kube.prod.pod.ns.p", "kube.prod.node.n_1", "kube.a.pod..x", "kube.a.svc.x", "ops.a.b", "kube"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, subj string) {
		ref, err := ParseKube(subj)
		if err != nil {
			return
		}
		if got := ref.Subject(); got != subj {
			t.Fatalf("ParseKube(%q) = %+v, whose subject is %q", subj, ref, got)
		}
	})
}

package notify

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
)

func TestDecode(t *testing.T) {
	good, _ := envelope.New("cleanup/u/deleted/1", "opswire/p/cleanup", events.TypeCleanup, "ns/p",
		events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p", Severity: events.SeverityWarning}, time.Now())
	unknown, _ := envelope.New("x/1", "opswire/p/x", "io.opswire.ops.unknown.v1", "", map[string]int{}, time.Now())
	badBody := good.Msg("ops.p.cleanup.deleted.ns.p")
	badBody.Data = []byte(`{"verb": 3}`)
	tests := []struct {
		name      string
		msg       *nats.Msg
		malformed bool
	}{
		{"cleanup decision", good.Msg("ops.p.cleanup.deleted.ns.p"), false},
		{"no headers", &nats.Msg{Subject: "ops.p.x", Data: []byte(`{}`)}, true},
		{"unknown type", unknown.Msg("ops.p.x"), true},
		{"payload does not decode", badBody, true},
		// Another actor's id, source or type on an actor's own subject: the
		// report user holding cleanup's deterministic id, or dressing up.
		{"another actor's id", good.Msg("ops.p.report.restarts"), true},
		{"id of the subject's actor, another's source", forged("report/x", "opswire/p/cleanup", events.TypeRestartReport, "ops.p.report.restarts"), true},
		{"source of another cluster", forged("cleanup/u/deleted/1", "opswire/q/cleanup", events.TypeCleanup, "ops.p.cleanup.deleted.ns.p"), true},
		{"another actor's type", forged("report/x", "opswire/p/report", events.TypeCleanup, "ops.p.report.restarts"), true},
		{"not an ops subject", good.Msg("ops.p"), true},
		{"dotted cluster", forged("cleanup/u/deleted/1", "opswire/a.b/cleanup", events.TypeCleanup, "ops.a_b.cleanup.deleted.ns.p"), false},
		{"a cluster name holding '/' (an EKS ARN)", forged("cleanup/u/deleted/1", "opswire/arn:aws:eks:eu-west-1:1:cluster/prod/cleanup", events.TypeCleanup,
			"ops.arn:aws:eks:eu-west-1:1:cluster/prod.cleanup.deleted.ns.p"), false},
		{"an ARN cluster's source, another actor", forged("cleanup/u/deleted/1", "opswire/arn:aws:eks:eu-west-1:1:cluster/prod/report", events.TypeCleanup,
			"ops.arn:aws:eks:eu-west-1:1:cluster/prod.cleanup.deleted.ns.p"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			it, err := Decode(tc.msg.Subject, tc.msg.Header, tc.msg.Data)
			if tc.malformed {
				if !errors.Is(err, envelope.ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil || it.Kind != KindCleanup || it.Namespace != "ns" || it.Severity != events.SeverityWarning {
				t.Fatalf("Decode = %+v, %v", it, err)
			}
		})
	}
}

func TestClusterToken(t *testing.T) {
	tests := []struct{ subj, want string }{
		{"ops.prod.cleanup.deleted.ns.p", "prod"},
		{"ops.my_cluster.report.restarts", "my_cluster"},
		{"ops.a", "a"},
		{"kube.a.node.n", ""},
		{"opsx.a.b", ""},
		{"", ""},
	}
	for _, tc := range tests {
		if got := ClusterToken(tc.subj); got != tc.want {
			t.Errorf("ClusterToken(%q) = %q, want %q", tc.subj, got, tc.want)
		}
	}
}

func forged(id, source, typ, subj string) *nats.Msg {
	ev, _ := envelope.New(id, source, typ, "ns/p",
		events.CleanupDecision{Verb: "deleted", Namespace: "ns", Pod: "p", Severity: events.SeverityWarning}, time.Now())
	return ev.Msg(subj)
}

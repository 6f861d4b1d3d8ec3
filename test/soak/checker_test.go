package soak

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/test/harness"
)

var rules = Rules{CordonUser: "cordon", CleanupUser: "cleanup", Cap: 1, TaintKey: "node.kubernetes.io/autocordon", OptOutLabel: "opswire.io/ignore"}

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// nodeWrite is a node write whose answer is the node with labels, cordon and Ready.
func nodeWrite(user, node string, rv int, labels map[string]string, unschedulable bool, ready string, taints ...string) harness.AuditEntry {
	var ts []map[string]string
	for _, k := range taints {
		ts = append(ts, map[string]string{"key": k, "effect": "NoSchedule"})
	}
	obj := map[string]any{"kind": "Node",
		"metadata": map[string]any{"name": node, "uid": "uid-" + node, "resourceVersion": fmt.Sprint(rv), "labels": labels},
		"spec":     map[string]any{"unschedulable": unschedulable, "taints": ts},
		"status":   map[string]any{"conditions": []map[string]string{{"type": "Ready", "status": ready}}}}
	b, _ := json.Marshal(obj)
	at := t0.Add(time.Duration(rv) * time.Millisecond)
	return harness.AuditEntry{AuditID: fmt.Sprintf("node-%d", rv), User: user, Verb: "patch", Resource: "nodes", Name: node,
		Code: 200, Received: at, Completed: at, Response: b}
}

// podDelete is a DELETE of a pod by user, answered 200 with the pod.
func podDelete(user, name, uid, node, owner, phase string, rv int, precondition bool) harness.AuditEntry {
	meta := map[string]any{"name": name, "namespace": "soak", "uid": uid, "resourceVersion": fmt.Sprint(rv)}
	if owner != "" {
		meta["ownerReferences"] = []map[string]any{{"kind": owner, "name": "x", "controller": true}}
	}
	b, _ := json.Marshal(map[string]any{"kind": "Pod", "metadata": meta, "spec": map[string]any{"nodeName": node},
		"status": map[string]any{"phase": phase}})
	at := t0.Add(time.Duration(rv) * time.Millisecond)
	e := harness.AuditEntry{AuditID: fmt.Sprintf("pod-%d", rv), User: user, Verb: "delete", Resource: "pods", Namespace: "soak", Name: name,
		Code: 200, Received: at, Completed: at, Response: b}
	if precondition {
		e.UIDPrecondition, e.RVPrecondition = uid, "1"
	}
	return e
}

func opsMsg(seq uint64, subject string, v any) OpsMsg {
	b, _ := json.Marshal(v)
	return OpsMsg{Subject: subject, Seq: seq, Data: b}
}

func invariants(vs []Violation) string {
	var s []string
	for _, v := range vs {
		s = append(s, v.Invariant)
	}
	return strings.Join(s, ",")
}

func TestCheckerCleanHistory(t *testing.T) {
	mark := map[string]string{"node.kubernetes.io/autocordon": "true"}
	audit := []harness.AuditEntry{
		nodeWrite("admin", "n1", 1, nil, false, "True"),
		nodeWrite("admin", "n2", 2, nil, false, "True"),
		nodeWrite("cordon", "n1", 3, mark, true, "True"),
		nodeWrite("cordon", "n1", 4, nil, false, "True"),
		nodeWrite("cordon", "n2", 5, mark, true, "True"),
		podDelete("cleanup", "p1", "u1", "n1", "", "Failed", 6, true),
		podDelete("cleanup", "ds1", "u2", "n3", "DaemonSet", "Running", 7, true), // node n3 never seen: not judged Ready
	}
	audit[6].Response = nil // no object: nothing to judge
	ops := []OpsMsg{
		opsMsg(1, "ops.default.cordon.cordoned.n1", map[string]any{"verb": "cordoned", "node": "n1"}),
		opsMsg(2, "ops.default.cordon.intent.n1", map[string]any{"verb": "uncordoned", "node": "n1"}),
		opsMsg(3, "ops.default.cordon.uncordoned.n1", map[string]any{"verb": "uncordoned", "node": "n1"}),
		opsMsg(4, "ops.default.cordon.cordoned.n2", map[string]any{"verb": "cordoned", "node": "n2"}),
		opsMsg(5, "ops.default.cleanup.deleted.soak.p1", map[string]any{"verb": "deleted", "podUID": "u1"}),
		opsMsg(6, "ops.default.cleanup.deleted.soak.ds1", map[string]any{"verb": "deleted", "podUID": "u2"}),
		opsMsg(7, "ops.default.cleanup.skipped.soak.p9", map[string]any{"verb": "skipped", "podUID": "u9"}),
	}
	if vs := Check(rules, audit, ops); len(vs) != 0 {
		t.Fatal(Report(1, vs))
	}
}

func TestCheckerCatches(t *testing.T) {
	mark := map[string]string{"node.kubernetes.io/autocordon": "true"}
	dnc := map[string]string{"node.kubernetes.io/donotcordon": "true"}
	cases := []struct {
		name  string
		audit []harness.AuditEntry
		ops   []OpsMsg
		want  string
	}{
		{"two marks over a cap of one (one episode)", []harness.AuditEntry{
			nodeWrite("cordon", "n1", 1, mark, true, "True"), nodeWrite("cordon", "n2", 2, mark, true, "True"),
			nodeWrite("admin", "n1", 3, mark, true, "False")},
			[]OpsMsg{opsMsg(1, "ops.default.cordon.cordoned.n1", map[string]any{"verb": "cordoned", "node": "n1"}),
				opsMsg(2, "ops.default.cordon.cordoned.n2", map[string]any{"verb": "cordoned", "node": "n2"})}, "b"},
		{"a person's cordon undone", []harness.AuditEntry{
			nodeWrite("admin", "n1", 1, nil, true, "True"), nodeWrite("cordon", "n1", 2, nil, false, "True")},
			[]OpsMsg{opsMsg(1, "ops.default.cordon.uncordoned.n1", map[string]any{"verb": "uncordoned", "node": "n1"})}, "c"},
		{"donotcordon written to", []harness.AuditEntry{
			nodeWrite("admin", "n1", 1, dnc, false, "True"), nodeWrite("cordon", "n1", 2, map[string]string{"node.kubernetes.io/donotcordon": "true", "node.kubernetes.io/autocordon": "true"}, true, "True")},
			[]OpsMsg{opsMsg(1, "ops.default.cordon.cordoned.n1", map[string]any{"verb": "cordoned", "node": "n1"})}, "c"},
		{"a write without its outcome", []harness.AuditEntry{nodeWrite("cordon", "n1", 1, mark, true, "True")}, nil, "d"},
		{"an outcome without its write", nil,
			[]OpsMsg{opsMsg(1, "ops.default.cleanup.deleted.soak.p1", map[string]any{"verb": "deleted", "podUID": "u1"})}, "d"},
		{"a pod deleted twice", []harness.AuditEntry{
			podDelete("cleanup", "p1", "u1", "", "", "Failed", 1, true), podDelete("cleanup", "p1", "u1", "", "", "Failed", 2, true)},
			[]OpsMsg{opsMsg(1, "ops.default.cleanup.deleted.soak.p1", map[string]any{"verb": "deleted", "podUID": "u1"}),
				opsMsg(2, "ops.default.cleanup.deleted.soak.p1", map[string]any{"verb": "deleted", "podUID": "u1"})}, "a"},
		{"a delete without preconditions", []harness.AuditEntry{podDelete("cleanup", "p1", "u1", "", "", "Failed", 1, false)},
			[]OpsMsg{opsMsg(1, "ops.default.cleanup.deleted.soak.p1", map[string]any{"verb": "deleted", "podUID": "u1"})}, "a2"},
		{"a StatefulSet pod on a Ready node", []harness.AuditEntry{
			nodeWrite("admin", "n1", 1, nil, false, "True"), podDelete("cleanup", "web-0", "u1", "n1", "StatefulSet", "Pending", 2, true)},
			[]OpsMsg{opsMsg(1, "ops.default.cleanup.forcedeleted.soak.web-0", map[string]any{"verb": "forcedeleted", "podUID": "u1"})}, "e"},
		{"a Failed DaemonSet pod", []harness.AuditEntry{
			nodeWrite("admin", "n1", 1, nil, false, "Unknown", "node.kubernetes.io/out-of-service"), podDelete("cleanup", "ds-1", "u1", "n1", "DaemonSet", "Failed", 2, true)},
			[]OpsMsg{opsMsg(1, "ops.default.cleanup.deleted.soak.ds-1", map[string]any{"verb": "deleted", "podUID": "u1"})}, "e"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := Check(rules, c.audit, c.ops)
			if got := invariants(vs); got != c.want {
				t.Fatalf("violations %q, want %q:\n%s", got, c.want, Report(7, vs))
			}
		})
	}
	// A DaemonSet pod on a node down and out-of-service is released.
	ok := []harness.AuditEntry{
		nodeWrite("admin", "n1", 1, nil, false, "Unknown", "node.kubernetes.io/out-of-service"),
		podDelete("cleanup", "ds-1", "u1", "n1", "DaemonSet", "Pending", 2, true)}
	if vs := Check(rules, ok, []OpsMsg{opsMsg(1, "ops.default.cleanup.forcedeleted.soak.ds-1", map[string]any{"verb": "forcedeleted", "podUID": "u1"})}); len(vs) != 0 {
		t.Fatal(Report(7, vs))
	}
}

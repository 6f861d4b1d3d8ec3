// Package soak is the randomized fault soak of issue 42: the real services
// against the real control plane under a seeded workload and fault
// schedule, then a checker over the API server's audit log and OPS. The
// soak itself (soak_test.go) runs only when SOAK_DURATION is set (make
// soak); the checker's own tests run in make test. docs/soak.md.
package soak

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// Rules are what the checker holds opswire to: who opswire is in the audit
// log and the configuration the soak ran.
type Rules struct {
	CordonUser  string // e.g. system:serviceaccount:opswire:opswire-cordon
	CleanupUser string
	Cap         int    // the blast-radius cap in nodes (capCounts: marks)
	TaintKey    string // autoCordon.taintKey
	OptOutLabel string // delException.optOutLabel
}

// OpsMsg is one message of the OPS stream.
type OpsMsg struct {
	Subject string
	Seq     uint64
	Data    []byte
}

// Violation is one broken invariant with the history that shows it.
type Violation struct {
	Invariant string // a, a2, b, c, d, e, f: docs/soak.md
	Message   string
	Evidence  []string // audit log lines or OPS messages
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s] %s%s", v.Invariant, v.Message, indent(v.Evidence))
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("\n      " + l)
	}
	return b.String()
}

// describe is an audit entry on one line.
func describe(e harness.AuditEntry) string {
	id := e.AuditID
	if len(id) > 8 {
		id = id[:8]
	}
	return fmt.Sprintf("audit %s %s %s %s/%s %s/%s -> %d (uid precondition %q, received %s)", id,
		e.Completed.Format("15:04:05.000"), e.User, e.Resource, e.Subresource, e.Namespace, e.Name, e.Code,
		e.UIDPrecondition, e.Received.Format("15:04:05.000"))
}

// nodeState is a node as the audit log last showed it.
type nodeState struct {
	obj      *harness.AuditObject // nil once deleted
	at       time.Time
	rv       int64
	from     harness.AuditEntry
	markedBy harness.AuditEntry // the write that put the mark there, while marked
}

// Check runs every invariant over the history and returns the violations
// (none: the run kept every rule the checker knows).
func Check(r Rules, audit []harness.AuditEntry, ops []OpsMsg) []Violation {
	var out []Violation
	out = append(out, checkNodes(r, audit)...)
	out = append(out, checkPods(r, audit)...)
	out = append(out, checkOutcomes(r, audit, ops)...)
	return out
}

// nodeWrites are the successful node writes that logged the node as it
// stood after them, in etcd's order (resourceVersion: one revision for the
// whole cluster, so no clock is trusted).
func nodeWrites(audit []harness.AuditEntry) []harness.AuditEntry {
	var ws []harness.AuditEntry
	for _, e := range audit {
		if e.Resource == "nodes" && e.Succeeded() && e.ResponseObject() != nil {
			ws = append(ws, e)
		}
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].ResponseObject().RV() < ws[j].ResponseObject().RV() })
	return ws
}

func marked(o *harness.AuditObject) bool {
	if o == nil {
		return false
	}
	_, ok := o.Metadata.Labels[events.LabelAutoCordon]
	return ok
}

// personTaint reports a taint opswire must treat as a person's (docs/cordon.md
// row 10: any key but Kubernetes' own, with the default ignoreTaintKeys).
func personTaint(o *harness.AuditObject, own string) string {
	for _, tn := range o.Spec.Taints {
		if tn.Key == own || strings.HasPrefix(tn.Key, "node.kubernetes.io/") || strings.HasPrefix(tn.Key, "node.cloudprovider.kubernetes.io/") {
			continue
		}
		return tn.Key
	}
	return ""
}

// checkNodes replays every node write in order: (b) the cap on opswire's
// marks at every instant, (c) opswire's writes to nodes it must leave alone.
func checkNodes(r Rules, audit []harness.AuditEntry) []Violation {
	var out []Violation
	state := map[string]*nodeState{}
	over := false
	for _, e := range nodeWrites(audit) {
		obj := e.ResponseObject()
		prev := state[e.Name]
		if e.User == r.CordonUser && e.Subresource == "" && prev != nil && prev.obj != nil {
			p := prev.obj
			ev := []string{"before: " + describe(prev.from), "write:  " + describe(e)}
			if _, ok := p.Metadata.Labels[events.LabelDoNotCordon]; ok {
				out = append(out, Violation{"c", fmt.Sprintf("opswire wrote to node %s, labelled %s (cordon.md rows 1, 1b: nothing, ever)",
					e.Name, events.LabelDoNotCordon), ev})
			}
			if !marked(p) && marked(obj) && (p.Spec.Unschedulable || p.HasTaint(r.TaintKey)) {
				out = append(out, Violation{"c", fmt.Sprintf("opswire marked node %s that someone else held cordoned (row 9)", e.Name), ev})
			}
			if k := personTaint(p, r.TaintKey); !marked(p) && marked(obj) && k != "" {
				out = append(out, Violation{"c", fmt.Sprintf("opswire cordoned node %s, tainted %s by a person (row 10)", e.Name, k), ev})
			}
			if !marked(p) && p.Spec.Unschedulable && !obj.Spec.Unschedulable {
				out = append(out, Violation{"c", fmt.Sprintf("opswire uncordoned node %s that it had not marked (ownership)", e.Name), ev})
			}
			for _, tn := range p.Spec.Taints {
				if tn.Key != r.TaintKey && !obj.HasTaint(tn.Key) {
					out = append(out, Violation{"c", fmt.Sprintf("opswire removed taint %s from node %s (it only adds or removes %s)",
						tn.Key, e.Name, r.TaintKey), ev})
				}
			}
		}
		ns := &nodeState{obj: obj, at: e.Completed, rv: obj.RV(), from: e}
		if e.Verb == "delete" {
			ns.obj = nil
		}
		switch {
		case !marked(ns.obj):
		case prev != nil && marked(prev.obj):
			ns.markedBy = prev.markedBy
		default:
			ns.markedBy = e
		}
		state[e.Name] = ns
		var held []string
		for name, s := range state {
			if marked(s.obj) {
				held = append(held, name)
			}
		}
		// Reported once per episode over the cap, with the writes that
		// put each mark in place.
		if len(held) > r.Cap && !over {
			sort.Strings(held)
			var ev []string
			for _, name := range held {
				ev = append(ev, "marked: "+describe(state[name].markedBy))
			}
			out = append(out, Violation{"b", fmt.Sprintf("%d nodes carry opswire's mark from resourceVersion %d, cap %d: %s",
				len(held), obj.RV(), r.Cap, strings.Join(held, ", ")), ev})
		}
		over = len(held) > r.Cap
	}
	return out
}

// nodeAt is the node as the audit log showed it at t (nil: deleted, or
// never seen; seen reports which).
func nodeAt(hist map[string][]nodeState, name string, t time.Time) (obj *harness.AuditObject, seen bool) {
	for _, s := range hist[name] {
		if s.at.After(t) {
			break
		}
		obj, seen = s.obj, true
	}
	return obj, seen
}

// checkPods: (a) no pod removed twice, (a2) every DELETE under UID and
// resourceVersion preconditions, (e) no DaemonSet or StatefulSet pod deleted
// but on a node gone or confirmed down, (f) no opted-out pod touched.
func checkPods(r Rules, audit []harness.AuditEntry) []Violation {
	var out []Violation
	hist := map[string][]nodeState{}
	for _, e := range nodeWrites(audit) {
		s := nodeState{obj: e.ResponseObject(), at: e.Completed, from: e}
		if e.Verb == "delete" {
			s.obj = nil
		}
		hist[e.Name] = append(hist[e.Name], s)
	}
	for name := range hist {
		h := hist[name]
		sort.SliceStable(h, func(i, j int) bool { return h[i].at.Before(h[j].at) })
	}
	removed := map[string]harness.AuditEntry{} // pod UID -> the DELETE that removed it
	for _, e := range audit {
		if e.User != r.CleanupUser || e.Resource != "pods" || e.Subresource != "" || e.Verb != "delete" {
			continue
		}
		if e.UIDPrecondition == "" || e.RVPrecondition == "" {
			out = append(out, Violation{"a2", fmt.Sprintf("opswire deleted pod %s/%s without a UID and resourceVersion precondition (cleanup.md: DELETE with UID+resourceVersion preconditions)",
				e.Namespace, e.Name), []string{describe(e)}})
		}
		if !e.Succeeded() {
			continue
		}
		pod := e.ResponseObject()
		uid := e.UIDPrecondition
		if pod != nil {
			uid = pod.Metadata.UID
		}
		if first, ok := removed[uid]; ok {
			out = append(out, Violation{"a", fmt.Sprintf("opswire deleted pod %s/%s (uid %s) twice, both answered with success", e.Namespace, e.Name, uid),
				[]string{describe(first), describe(e)}})
		}
		// A pod that stays (finalizers) may be deleted again later (rows 8-9).
		if pod == nil || len(pod.Metadata.Finalizers) == 0 {
			removed[uid] = e
		}
		if pod == nil {
			continue
		}
		if _, ok := pod.Metadata.Labels[r.OptOutLabel]; ok && r.OptOutLabel != "" {
			out = append(out, Violation{"f", fmt.Sprintf("opswire deleted pod %s/%s labelled %s (never touched)", e.Namespace, e.Name, r.OptOutLabel),
				[]string{describe(e)}})
		}
		kind := pod.ControllerKind()
		if kind != "DaemonSet" && kind != "StatefulSet" {
			continue
		}
		if pod.Status.Phase == "Failed" && pod.Metadata.DeletionTimestamp == nil {
			out = append(out, Violation{"e", fmt.Sprintf("opswire deleted the Failed %s pod %s/%s (row 4b: left to its controller)", kind, e.Namespace, e.Name),
				[]string{describe(e)}})
			continue
		}
		if pod.Spec.NodeName == "" {
			continue // runs nowhere: released (row 10's note)
		}
		node, seen := nodeAt(hist, pod.Spec.NodeName, e.Received)
		if seen && node == nil {
			continue // the node is gone
		}
		if node != nil && node.Ready() != "True" && node.HasTaint("node.kubernetes.io/out-of-service") {
			continue // confirmed down: PodGC's own condition
		}
		ready, oos := "unknown", false
		if node != nil {
			ready, oos = node.Ready(), node.HasTaint("node.kubernetes.io/out-of-service")
		}
		out = append(out, Violation{"e", fmt.Sprintf("opswire deleted the %s pod %s/%s on node %s (Ready=%s, out-of-service=%v): rows 10-11 hold it",
			kind, e.Namespace, e.Name, pod.Spec.NodeName, ready, oos), []string{describe(e)}})
	}
	return out
}

// Outcome verbs that stand for a write opswire made.
var (
	cordonWriteVerbs  = map[string]bool{"cordoned": true, "uncordoned": true, "handedover": true}
	cleanupWriteVerbs = map[string]bool{"deleted": true, "forcedeleted": true, "deletionrequested": true}
)

// checkOutcomes (d): every successful opswire write in the audit log has
// exactly one outcome in OPS, and every outcome that claims a write has one.
func checkOutcomes(r Rules, audit []harness.AuditEntry, ops []OpsMsg) []Violation {
	type tally struct {
		writes   []string
		outcomes []string
	}
	cordon, cleanup := map[string]*tally{}, map[string]*tally{}
	get := func(m map[string]*tally, k string) *tally {
		if m[k] == nil {
			m[k] = &tally{}
		}
		return m[k]
	}
	for _, e := range audit {
		if !e.Succeeded() {
			continue
		}
		switch {
		case e.User == r.CordonUser && e.Resource == "nodes" && e.Subresource == "" && (e.Verb == "patch" || e.Verb == "update"):
			get(cordon, e.Name).writes = append(get(cordon, e.Name).writes, describe(e))
		case e.User == r.CleanupUser && e.Resource == "pods" && e.Subresource == "" && e.Verb == "delete":
			uid := e.UIDPrecondition
			if pod := e.ResponseObject(); pod != nil {
				uid = pod.Metadata.UID
			}
			get(cleanup, uid).writes = append(get(cleanup, uid).writes, describe(e))
		}
	}
	for _, m := range ops {
		line := fmt.Sprintf("OPS #%d %s %s", m.Seq, m.Subject, m.Data)
		switch {
		case strings.Contains(m.Subject, ".cordon.") && !strings.Contains(m.Subject, ".cordon.intent."):
			var d events.CordonDecision
			if json.Unmarshal(m.Data, &d) == nil && cordonWriteVerbs[d.Verb] && !d.DryRun {
				get(cordon, d.Node).outcomes = append(get(cordon, d.Node).outcomes, line)
			}
		case strings.Contains(m.Subject, ".cleanup.") && !strings.Contains(m.Subject, ".cleanup.intent."):
			var d events.CleanupDecision
			if json.Unmarshal(m.Data, &d) == nil && cleanupWriteVerbs[d.Verb] && !d.DryRun {
				get(cleanup, d.PodUID).outcomes = append(get(cleanup, d.PodUID).outcomes, line)
			}
		}
	}
	var out []Violation
	for _, side := range []struct {
		what string
		m    map[string]*tally
	}{{"node", cordon}, {"pod uid", cleanup}} {
		keys := make([]string, 0, len(side.m))
		for k := range side.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t := side.m[k]
			if len(t.writes) != len(t.outcomes) {
				out = append(out, Violation{"d", fmt.Sprintf("%s %s: %d successful opswire writes in the audit log, %d outcomes in OPS",
					side.what, k, len(t.writes), len(t.outcomes)), append(append([]string(nil), t.writes...), t.outcomes...)})
			}
		}
	}
	return out
}

// Report is the checker's verdict as the soak prints it.
func Report(seed uint64, vs []Violation) string {
	if len(vs) == 0 {
		return fmt.Sprintf("soak seed %d: 0 violations", seed)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "soak seed %d: %d violations (replay: make soak SOAK_SEED=%d)", seed, len(vs), seed)
	for _, v := range vs {
		b.WriteString("\n  " + v.String())
	}
	return b.String()
}

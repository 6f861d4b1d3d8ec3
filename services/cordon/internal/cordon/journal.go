package cordon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// Happened is the live check of a new leader for an intent without its
// outcome in OPS (actuate.Recovery.Happened). It reads the node by name and
// says true only when the live node shows exactly the patch the intent
// names:
//
//   - cordoned: the same node (UID) carries opswire's label and a mark of
//     this write (its rv is the version the intent was decided on; for a
//     mark without rv, its time is the intent's), listing the intent's
//     mode, and the effect is in place (spec.unschedulable, or the
//     NoSchedule taint the mark lists);
//   - uncordoned: the same node carries no opswire label or mark and is
//     schedulable (cordon mode) or without opswire's taint (taint mode);
//   - handedover: no opswire label or mark, still unschedulable, without
//     opswire's taint.
//
// Everything else is false, and nothing is published for the intent: the
// node still has the version the intent was decided on past the late-commit
// horizon of the intent's time (the patch did not happen; within the horizon
// it may still commit, and Happened returns an error so the recovery retries
// until the node moves on or the horizon passes), the node is gone or replaced, or the live state is ambiguous
// (a person undid the cordon since, another write re-marked the node).
// The intent still counts in the rate window. An API error (other than
// NotFound) fails the check, and the recovery retries.
func (a *Actuator) Happened(ctx context.Context, in events.Intent) (bool, error) {
	var d events.CordonDecision
	if err := json.Unmarshal(in.Outcome.Data, &d); err != nil {
		a.ambiguous(in, "the intent's outcome does not decode")
		return false, nil
	}
	v, _, why, err := a.lookBack(ctx, in.Name, in.UID, in.Action, d, false)
	if err != nil {
		return false, fmt.Errorf("re-read node %s of an intent: %w", in.Name, err)
	}
	if v == unchanged && in.Answered == "" {
		// The old leader's write may still commit (its answer was lost as
		// its term ended): an unchanged node is no proof yet. An answered
		// attempt (actuate.NewAnswer) cannot commit late: its unchanged
		// node is final.
		if err := actuate.StillUndecided("node "+in.Name, in.Time, a.horizon(), a.cfg.Now()); err != nil {
			return false, err
		}
	}
	if v == unclear {
		a.ambiguous(in, why)
	}
	return v == applied, nil
}

// Recovery is what a new leader's SeedAndRecover reads back with: the
// intents and outcomes of this actor, Happened, LiveActions, the audit
// publisher, and the
// late-commit horizon, so an intent whose write Happened shows (a late
// commit of the old leader's write in doubt) counts in the window from the
// read that showed it, at most the horizon after its intent, not from the
// intent: as settle counts a write in doubt from the read that decides it.
func (a *Actuator) Recovery() actuate.Recovery {
	return actuate.Recovery{Intents: actuate.IntentSubjects(a.cfg.Cluster, Service), Outcomes: ActionSubjects(a.cfg.Cluster),
		Happened: a.Happened, Audit: a.audit, Live: a.LiveActions, LateCommit: a.horizon()}
}

// sameWrite reports whether mark m was written by the cordon decided as d.
// The mark records the resourceVersion the patch was preconditioned on, and
// the API applies at most one patch to a node's uid and version, however
// often it was attempted: a retry on the same version (after a 503 that
// wrote nothing) marks the node with its own, later time while OPS keeps the
// first attempt's intent (same id), so the time cannot tell. A mark without
// rv (an older version's) is told by its time.
func sameWrite(m Mark, d events.CordonDecision) bool {
	if m.RV != "" && d.ResourceVersion != "" {
		return m.RV == d.ResourceVersion
	}
	return m.Time.Equal(d.Time)
}

// patchVisible reports whether node shows the patch of verb decided as d,
// and why not.
func patchVisible(p Policy, node *corev1.Node, verb string, d events.CordonDecision) (bool, string) {
	mode := d.Mode
	if mode == "" {
		mode = p.Mode
	}
	_, labelled := node.Labels[events.LabelAutoCordon]
	_, annotated := node.Annotations[events.AnnotationAutoCordon]
	m, marked := readMark(node.Annotations)
	taintKeys := []string{p.TaintKey}
	if marked {
		taintKeys = append(taintKeys, m.TaintKeys...)
	}
	ourTaint := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule && slices.Contains(taintKeys, t.Key)
	})
	switch verb {
	case VerbCordoned:
		switch {
		case !labelled || !marked:
			return false, "node carries no opswire mark (not cordoned, or undone since)"
		case !sameWrite(m, d):
			return false, "node carries a mark from another write"
		case !slices.Contains(m.Effects, mode):
			return false, "the mark does not list the intent's mode"
		case m.RV != "" && d.ResourceVersion != "":
			// The mark names the version this write was patched against,
			// and the patch sets mark and effect together: it happened,
			// even if a person has lifted the effect since.
			return true, ""
		case mode == EffectTaint && !ourTaint:
			return false, "node carries the mark but not opswire's taint"
		case mode != EffectTaint && !node.Spec.Unschedulable:
			return false, "node carries the mark but is schedulable"
		}
		return true, ""
	case VerbUncordoned, VerbHandedOver:
		switch {
		case labelled || annotated:
			return false, "node still carries opswire's mark (not released, or cordoned again)"
		case ourTaint:
			return false, "node still carries opswire's taint"
		case verb == VerbUncordoned && mode != EffectTaint && node.Spec.Unschedulable:
			return false, "node is unmarked but unschedulable (cordoned since by someone else)"
		case verb == VerbHandedOver && !node.Spec.Unschedulable:
			return false, "node is unmarked and schedulable (the person's cordon was lifted since)"
		}
		return true, ""
	}
	return false, "unknown intent action " + verb
}

// LiveActions is the API's record of this actor's recent writes
// (actuate.Recovery.Live), which does not depend on NATS: a leader that acted
// during a NATS outage and died with the audits in its backlog left only
// this. Each is returned with its outcome audit rebuilt with the id the
// original has, cordon/<uid>/<verb>/<rv the write was decided on>:
//
//   - cordons: every node carrying opswire's label and a mark written since
//     the given time (one quorum LIST); the mark records the rv. Marks
//     without one (an older version's) are left out;
//   - uncordons and handovers, which remove the mark: the Kubernetes Events
//     opswire-cordon recorded on nodes (OpswireUncordoned,
//     OpswireCordonHandedOver) last seen since the given time; the Event's
//     involvedObject.resourceVersion is the node version the write was
//     decided on. An Event the recorder aggregated (count > 1) stands for
//     several writes of which only the first's version is known: left out
//     (docs/cordon.md). Events are not authenticated: one that the live
//     node contradicts (releaseContradicted) is refused, logged and counted
//     once, neither published nor counted in the window.
//
// The Events are listed before the nodes: a release that lands between the
// two reads is then either missing from both (decided by the next leader) or
// shows as an unmarked node, never as an Event about a node still marked.
func (a *Actuator) LiveActions(ctx context.Context, since time.Time) ([]actuate.LiveAction, error) {
	evs, err := a.releaseEvents(ctx)
	if err != nil {
		return nil, err
	}
	marked, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.NodeList, error) {
		return a.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: markSelector.String()})
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes carrying opswire's mark: %w", err)
	}
	out, err := a.liveCordons(marked.Items, since)
	if err != nil {
		return nil, err
	}
	rel, err := a.liveReleases(evs, marked.Items, since)
	if err != nil {
		return nil, err
	}
	return append(out, rel...), nil
}

// EventSource is the component of the Kubernetes Events cordon records.
const EventSource = "opswire-" + Service

// releaseEvents lists opswire-cordon's Events on nodes.
func (a *Actuator) releaseEvents(ctx context.Context) ([]corev1.Event, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("source", EventSource),
		fields.OneTermEqualSelector("involvedObject.kind", "Node")).String()
	list, err := actuate.Call(ctx, a.cfg.APITimeout, func(ctx context.Context) (*corev1.EventList, error) {
		return a.client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
	})
	if err != nil {
		return nil, fmt.Errorf("list opswire-cordon's Events on nodes: %w", err)
	}
	return list.Items, nil
}

// liveReleases rebuilds the uncordons and handovers of the Events, checked
// against marked, the nodes carrying opswire's label read after them.
func (a *Actuator) liveReleases(evs []corev1.Event, marked []corev1.Node, since time.Time) ([]actuate.LiveAction, error) {
	byName := make(map[string]*corev1.Node, len(marked))
	for i := range marked {
		byName[marked[i].Name] = &marked[i]
	}
	var out []actuate.LiveAction
	for i := range evs {
		ev := &evs[i]
		var verb string
		var action Action
		sev := events.SeverityInfo
		switch ev.Reason {
		case EventUncordoned:
			verb, action = VerbUncordoned, ActionUncordon
		case EventHandedOver:
			verb, action, sev = VerbHandedOver, ActionHandOver, events.SeverityWarning
		default:
			continue
		}
		at := ev.LastTimestamp.Time
		if at.IsZero() {
			at = ev.EventTime.Time
		}
		obj := ev.InvolvedObject
		if ev.Source.Component != EventSource || obj.Kind != "Node" || obj.UID == "" || obj.ResourceVersion == "" ||
			ev.Count > 1 || at.Before(since) {
			continue
		}
		if why, ok := releaseContradicted(ev, byName[obj.Name]); ok {
			a.refuseEvent(ev, why)
			continue
		}
		// The message is "opswire <verb> (<mode>): <reason>".
		mode, reason := a.cfg.Policy.Mode, ev.Message
		if rest, ok := strings.CutPrefix(ev.Message, "opswire "+verb+" ("); ok {
			if m, r, ok := strings.Cut(rest, "): "); ok {
				mode, reason = m, r
			}
		}
		p := events.CordonDecision{
			Verb: verb, Action: string(action), Mode: mode, Node: obj.Name, NodeUID: string(obj.UID), Reason: reason,
			Severity: sev, Time: at.UTC(), ResourceVersion: obj.ResourceVersion, Replica: ev.Source.Host,
		}
		id := "cordon/" + string(obj.UID) + "/" + verb + "/" + obj.ResourceVersion
		oe, err := envelope.New(id, envelope.Source(a.cfg.Cluster, Service), events.TypeCordon, obj.Name, p, at)
		if err != nil {
			return nil, fmt.Errorf("rebuild the outcome of Event %s: %w", ev.Name, err)
		}
		out = append(out, actuate.LiveAction{Time: at, Subject: subject.Ops(a.cfg.Cluster, Service, verb, obj.Name), Outcome: oe})
	}
	return out, nil
}

// releaseContradicted reports whether the live node (nil: it carries no
// opswire label) shows that the release an Event claims did not happen, and
// why. A release removes opswire's label and mark, so a node of the Event's
// uid that still carries a mark written before the Event was not released by
// it: the mark was decided on a version no newer than the one the Event
// names (a release is decided on a later version than the cordon whose mark
// it removes, and a cordon after the release on a later one still), or
// written before the API server created the Event (a genuine Event is
// created just after its release, so before any cordon that follows it),
// or its time and version cannot be read (a label without a readable mark).
// A node re-created under the name, or without the label, contradicts
// nothing (docs/security.md: what stays possible).
func releaseContradicted(ev *corev1.Event, node *corev1.Node) (string, bool) {
	if node == nil || node.UID != ev.InvolvedObject.UID {
		return "", false
	}
	m, ok := readMark(node.Annotations)
	switch {
	case !ok:
		return "the node still carries opswire's label (its mark unreadable)", true
	case m.RV != "" && !rvNewer(m.RV, ev.InvolvedObject.ResourceVersion):
		return fmt.Sprintf("the node still carries opswire's mark, decided on version %s, not after the version %s the Event names",
			m.RV, ev.InvolvedObject.ResourceVersion), true
	case !m.Time.After(ev.CreationTimestamp.Time):
		return fmt.Sprintf("the node still carries opswire's mark, written at %s, before the Event was created (%s)",
			m.Time.UTC().Format(time.RFC3339Nano), ev.CreationTimestamp.UTC().Format(time.RFC3339Nano)), true
	}
	return "", false
}

// refuseEvent logs and counts (opswire_cordon_recovery_events_rejected_total)
// a release Event the recovery refused, once per Event and term: a retried
// recovery lists it again.
func (a *Actuator) refuseEvent(ev *corev1.Event, why string) {
	if !a.refused.First(ev.UID) {
		return
	}
	a.m.RecoveryRejected.WithLabelValues(rejectedForged).Inc()
	a.log.Warn().Str("event", ev.Namespace+"/"+ev.Name).Str("reason", ev.Reason).Str("node", ev.InvolvedObject.Name).
		Str("rv", ev.InvolvedObject.ResourceVersion).Str("why", why).Str("host", ev.Source.Host).
		Str("reportingController", ev.ReportingController).
		Msg("release Event contradicted by the live node, refused by the recovery (not published, not counted in the rate window)")
}

// maxRefused bounds Actuator.refused (actuate.Once).
const maxRefused = 4096

// liveCordons rebuilds the cordons of the marks on marked, the nodes
// carrying opswire's label.
func (a *Actuator) liveCordons(marked []corev1.Node, since time.Time) ([]actuate.LiveAction, error) {
	var out []actuate.LiveAction
	for i := range marked {
		node := &marked[i]
		m, ok := readMark(node.Annotations)
		if !ok || m.RV == "" || m.Time.Before(since) {
			continue
		}
		mode := a.cfg.Policy.Mode
		if len(m.Effects) > 0 {
			mode = m.Effects[len(m.Effects)-1]
		}
		p := events.CordonDecision{
			Verb: VerbCordoned, Action: string(ActionCordon), Mode: mode, Node: node.Name, NodeUID: string(node.UID),
			Pods: m.Pods, MaxPods: m.MaxPods, MinPods: m.MinPods, Reason: m.Reason, Code: m.Code,
			Severity: events.SeverityWarning, Time: m.Time, ResourceVersion: m.RV, Replica: m.By,
		}
		id := "cordon/" + string(node.UID) + "/" + VerbCordoned + "/" + m.RV
		ev, err := envelope.New(id, envelope.Source(a.cfg.Cluster, Service), events.TypeCordon, node.Name, p, m.Time)
		if err != nil {
			return nil, fmt.Errorf("rebuild the outcome of node %s's mark: %w", node.Name, err)
		}
		out = append(out, actuate.LiveAction{Time: m.Time, Subject: subject.Ops(a.cfg.Cluster, Service, VerbCordoned, node.Name), Outcome: ev})
	}
	return out, nil
}

func (a *Actuator) ambiguous(in events.Intent, why string) {
	a.log.Info().Str("node", in.Name).Str("uid", in.UID).Str("action", in.Action).Str("id", in.Outcome.ID).Str("why", why).
		Msg("intent without its outcome in OPS: the live node does not show its patch; no outcome published")
}

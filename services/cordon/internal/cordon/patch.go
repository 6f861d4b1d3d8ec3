package cordon

import (
	"encoding/json"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/opswire/opswire/shared/events"
)

// MarkLabelValue is the value of opswire's label; only the key matters.
const MarkLabelValue = "true"

// Mark is the JSON in the opswire.io/autocordon annotation: why opswire
// holds the node and exactly what it applied, so the uncordon undoes that
// and nothing else (also after a change of mode or taintKey).
type Mark struct {
	Effects   []string  `json:"effects"`             // cordon and/or taint
	TaintKeys []string  `json:"taintKeys,omitempty"` // keys of the NoSchedule taints opswire added
	Reason    string    `json:"reason"`
	Pods      int       `json:"pods"`
	MaxPods   int       `json:"maxPods"`
	MinPods   int       `json:"minPods"`
	Time      time.Time `json:"time"`
	By        string    `json:"by,omitempty"` // replica identity
	Code      string    `json:"code,omitempty"`
	// RV is the node's resourceVersion the cordon was decided on and
	// patched against: with the node's uid it makes the id of the cordon's
	// outcome audit, so a new leader can rebuild that audit from the API
	// with the original's id (Actuator.LiveActions). Absent in older marks.
	RV string `json:"rv,omitempty"`
	// Departed holds the node's departure totals (NodeState.Departed,
	// DepartedEvicted) when opswire cordoned it: the baseline from which
	// the pods that left since then are counted (Policy.drainedAway).
	// Absent in marks written before opswire recorded it.
	Departed *Departures `json:"departed,omitempty"`
}

// Departures are a node's running totals of pods that left it, and of those
// that left through the Eviction API.
type Departures struct {
	Pods    int `json:"pods"`
	Evicted int `json:"evicted"`
}

// readMark parses the annotation; ok is false when it is absent or unreadable.
func readMark(annotations map[string]string) (Mark, bool) {
	var m Mark
	v, found := annotations[events.AnnotationAutoCordon]
	if !found || json.Unmarshal([]byte(v), &m) != nil || len(m.Effects) == 0 {
		return Mark{}, false
	}
	return m, true
}

// mergePatch is an RFC 7386 JSON merge patch of a node. It always carries
// metadata.resourceVersion and uid: the API server then applies it only to
// the exact version opswire re-verified, and answers 409 Conflict otherwise,
// so a concurrent change (a person, another replica) is never overwritten.
type mergePatch struct {
	Metadata patchMeta `json:"metadata"`
	Spec     patchSpec `json:"spec,omitzero"`
}

type patchMeta struct {
	ResourceVersion string             `json:"resourceVersion"`
	UID             string             `json:"uid"`
	Labels          map[string]*string `json:"labels"`
	Annotations     map[string]*string `json:"annotations"`
}

type patchSpec struct {
	// Unschedulable is a **bool so that "null" (remove, i.e. false) can be written.
	Unschedulable **bool `json:"unschedulable,omitempty"`
	// Taints replaces the whole list (merge patches replace lists); safe
	// because the resourceVersion precondition guarantees it is the list
	// opswire just read.
	Taints *[]corev1.Taint `json:"taints,omitempty"`
}

// cordonPatch marks the node and applies an effect. On a node that carries
// opswire's label and a readable mark (a re-apply: a person lifted an effect
// and left the mark) it puts back exactly the effects and taint keys the
// mark lists, whatever the current mode and taintKey: a switch of either
// must not add an effect to the nodes opswire already holds, and the release
// undoes what the mark lists. Any other node gets the current mode's effect
// and a fresh mark listing it.
func cordonPatch(p Policy, node *corev1.Node, d Decision, now time.Time, by string) ([]byte, Mark, error) {
	m := Mark{Reason: d.Reason, Pods: d.Pods, MaxPods: d.MaxPods, MinPods: d.MinPods, Time: now.UTC(), By: by,
		Code: d.Code, RV: node.ResourceVersion,
		Departed: &Departures{Pods: d.Departed, Evicted: d.DepartedEvicted}}
	m.Effects, m.TaintKeys = []string{p.Mode}, nil
	if p.Mode == EffectTaint {
		m.TaintKeys = []string{p.TaintKey}
	}
	if _, ok := readMark(node.Annotations); ok && carriesLabel(node) {
		m.Effects, m.TaintKeys = p.markEffects(node.Annotations)
	}
	ann, err := json.Marshal(m)
	if err != nil {
		return nil, m, err
	}
	patch := mergePatch{Metadata: patchMeta{
		ResourceVersion: node.ResourceVersion, UID: string(node.UID),
		Labels:      map[string]*string{events.LabelAutoCordon: ptr(MarkLabelValue)},
		Annotations: map[string]*string{events.AnnotationAutoCordon: ptr(string(ann))},
	}}
	if slices.Contains(m.Effects, EffectTaint) {
		taints := slices.Clone(node.Spec.Taints)
		for _, k := range m.TaintKeys {
			if !hasNodeTaint(node, k, corev1.TaintEffectNoSchedule) {
				taints = append(taints, corev1.Taint{Key: k, Value: MarkLabelValue, Effect: corev1.TaintEffectNoSchedule})
			}
		}
		if len(taints) > len(node.Spec.Taints) {
			patch.Spec.Taints = &taints
		}
	}
	if slices.Contains(m.Effects, EffectCordon) {
		yes := ptr(true)
		patch.Spec.Unschedulable = &yes
	}
	b, err := json.Marshal(patch)
	return b, m, err
}

// carriesLabel reports whether the node carries opswire's label.
func carriesLabel(node *corev1.Node) bool {
	_, ok := node.Labels[events.LabelAutoCordon]
	return ok
}

// AnnotationReleased records opswire's last release of a node (an uncordon
// or a hand-over): its verb and the resourceVersion it was patched against.
// It stays on the node. A release whose answer was lost is settled by a read
// of the node; a node without the mark is its release only when this record
// names the release's version: a person who removed the mark by hand (and,
// say, kept the node cordoned) left no such record.
const AnnotationReleased = "opswire.io/autocordon-released"

// Release is the JSON in AnnotationReleased.
type Release struct {
	Verb string    `json:"verb"`
	RV   string    `json:"rv"`
	Time time.Time `json:"time"`
}

// readRelease parses AnnotationReleased; ok is false when it is absent or
// unreadable.
func readRelease(annotations map[string]string) (Release, bool) {
	var r Release
	v, found := annotations[AnnotationReleased]
	if !found || json.Unmarshal([]byte(v), &r) != nil || r.RV == "" {
		return Release{}, false
	}
	return r, true
}

// uncordonPatch removes the mark and undoes exactly the effects the mark
// lists. Without a readable mark it undoes the current mode's effect.
func uncordonPatch(p Policy, node *corev1.Node, now time.Time) ([]byte, error) {
	return releasePatch(p, node, VerbUncordoned, now)
}

// handoverPatch hands a node a person is draining over to that person: it
// removes opswire's mark and the taints the mark lists, and keeps the cordon
// (spec.unschedulable), which from then on is the person's to lift.
func handoverPatch(p Policy, node *corev1.Node, now time.Time) ([]byte, error) {
	return releasePatch(p, node, VerbHandedOver, now)
}

func releasePatch(p Policy, node *corev1.Node, verb string, now time.Time) ([]byte, error) {
	keepCordon := verb == VerbHandedOver
	m, ok := readMark(node.Annotations)
	if !ok {
		m = Mark{Effects: []string{p.Mode}, TaintKeys: []string{p.TaintKey}}
	}
	rel, err := json.Marshal(Release{Verb: verb, RV: node.ResourceVersion, Time: now})
	if err != nil {
		return nil, err
	}
	patch := mergePatch{Metadata: patchMeta{
		ResourceVersion: node.ResourceVersion, UID: string(node.UID),
		Labels:      map[string]*string{events.LabelAutoCordon: nil},
		Annotations: map[string]*string{events.AnnotationAutoCordon: nil, AnnotationReleased: ptr(string(rel))},
	}}
	if !keepCordon && slices.Contains(m.Effects, EffectCordon) && node.Spec.Unschedulable {
		var unset *bool // JSON null: the field is removed, i.e. schedulable
		patch.Spec.Unschedulable = &unset
	}
	ours := func(t corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule && slices.Contains(m.TaintKeys, t.Key)
	}
	if slices.Contains(m.Effects, EffectTaint) && slices.ContainsFunc(node.Spec.Taints, ours) {
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), ours)
		if taints == nil {
			taints = []corev1.Taint{}
		}
		patch.Spec.Taints = &taints
	}
	return json.Marshal(patch)
}

func hasNodeTaint(node *corev1.Node, key string, effect corev1.TaintEffect) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key && t.Effect == effect })
}

// stateFromNode turns a node read from the API, and the pod count just
// taken, into the same shape the mirror holds, so that re-verification runs
// the very same Evaluate.
func stateFromNode(node *corev1.Node, pods int) *events.NodeState {
	n := &events.NodeState{
		Op: events.OpUpsert, UID: string(node.UID), Name: node.Name, ResourceVersion: node.ResourceVersion,
		Labels: node.Labels, Unschedulable: node.Spec.Unschedulable, Pods: pods,
		Annotations: map[string]string{},
	}
	if v, ok := node.Annotations[events.AnnotationAutoCordon]; ok {
		n.Annotations[events.AnnotationAutoCordon] = v
	}
	for _, t := range node.Spec.Taints {
		n.Taints = append(n.Taints, events.Taint{Key: t.Key, Value: t.Value, Effect: string(t.Effect)})
	}
	if q, ok := node.Status.Allocatable[corev1.ResourcePods]; ok {
		n.AllocatablePods = q.Value()
	}
	return n
}

func ptr[T any](v T) *T { return &v }

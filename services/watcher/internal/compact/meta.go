package compact

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// The informer cache needs metav1.Object (store keys, resourceVersion
// bookkeeping) and runtime.Object from what it stores. Embedding
// metav1.ObjectMeta would cost about 260 bytes per cached pod, a quarter of
// the watcher's heap, to repeat four fields the compact state already holds.
// Pod and Node therefore implement both interfaces over their state: name,
// namespace, UID and resourceVersion are read from and written to it, and
// every other field of ObjectMeta is absent (zero, and setting it does nothing,
// as metav1.Object allows for fields an object does not support).

var (
	_ metav1.Object  = (*Pod)(nil)
	_ runtime.Object = (*Pod)(nil)
	_ metav1.Object  = (*Node)(nil)
	_ runtime.Object = (*Node)(nil)
)

func (p *Pod) GetNamespace() string                 { return p.State.Namespace }
func (p *Pod) SetNamespace(ns string)               { p.State.Namespace = ns }
func (p *Pod) GetName() string                      { return p.State.Name }
func (p *Pod) SetName(name string)                  { p.State.Name = name }
func (p *Pod) GetUID() types.UID                    { return types.UID(p.State.UID) }
func (p *Pod) SetUID(uid types.UID)                 { p.State.UID = string(uid) }
func (p *Pod) GetResourceVersion() string           { return p.State.ResourceVersion }
func (p *Pod) SetResourceVersion(rv string)         { p.State.ResourceVersion = rv }
func (n *Node) GetNamespace() string                { return "" }
func (n *Node) SetNamespace(string)                 {}
func (n *Node) GetName() string                     { return n.State.Name }
func (n *Node) SetName(name string)                 { n.State.Name = name }
func (n *Node) GetUID() types.UID                   { return types.UID(n.State.UID) }
func (n *Node) SetUID(uid types.UID)                { n.State.UID = string(uid) }
func (n *Node) GetResourceVersion() string          { return n.State.ResourceVersion }
func (n *Node) SetResourceVersion(rv string)        { n.State.ResourceVersion = rv }
func (p *Pod) DeepCopyObject() runtime.Object       { return deepCopy(p) }
func (n *Node) DeepCopyObject() runtime.Object      { return deepCopy(n) }
func (absentMeta) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// deepCopy copies through the state's JSON form, which is its wire format
// and so holds all of it. Nothing on the watcher's path copies cached
// objects; this exists for runtime.Object's contract.
func deepCopy[T any](in *T) *T {
	b, err := json.Marshal(in)
	if err != nil {
		panic("compact: copy: " + err.Error()) // plain data: cannot fail
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic("compact: copy: " + err.Error())
	}
	return out
}

// absentMeta answers for the ObjectMeta fields compact objects do not keep.
type absentMeta struct{}

func (absentMeta) GetGenerateName() string                       { return "" }
func (absentMeta) SetGenerateName(string)                        {}
func (absentMeta) GetGeneration() int64                          { return 0 }
func (absentMeta) SetGeneration(int64)                           {}
func (absentMeta) GetSelfLink() string                           { return "" }
func (absentMeta) SetSelfLink(string)                            {}
func (absentMeta) GetCreationTimestamp() metav1.Time             { return metav1.Time{} }
func (absentMeta) SetCreationTimestamp(metav1.Time)              {}
func (absentMeta) GetDeletionTimestamp() *metav1.Time            { return nil }
func (absentMeta) SetDeletionTimestamp(*metav1.Time)             {}
func (absentMeta) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (absentMeta) SetDeletionGracePeriodSeconds(*int64)          {}
func (absentMeta) GetLabels() map[string]string                  { return nil }
func (absentMeta) SetLabels(map[string]string)                   {}
func (absentMeta) GetAnnotations() map[string]string             { return nil }
func (absentMeta) SetAnnotations(map[string]string)              {}
func (absentMeta) GetFinalizers() []string                       { return nil }
func (absentMeta) SetFinalizers([]string)                        {}
func (absentMeta) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (absentMeta) SetOwnerReferences([]metav1.OwnerReference)    {}
func (absentMeta) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (absentMeta) SetManagedFields([]metav1.ManagedFieldsEntry)  {}

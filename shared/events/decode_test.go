package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func fullPod() PodState {
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)
	t2 := t1.Add(time.Minute)
	grace := int64(30)
	return PodState{Op: OpUpsert, UID: "00000000-0000-4000-8000-000000000001", Namespace: "shop", Name: "web-7d9f8c6b5-abcde",
		ResourceVersion: "12345", NodeName: "node-0001", Phase: "Failed", Reason: "Evicted",
		Message: "The node was low on resource: ephemeral-storage. Ünïcode ✓ <b>&", CreationTimestamp: t1,
		DeletionTimestamp: &t2, DeletionGracePeriodSeconds: &grace, Finalizers: 2,
		Owner: &Owner{Kind: "Deployment", Name: "web"},
		Containers: []Container{{Name: "app", Restarts: 7, LastReason: "OOMKilled", LastExitCode: 137, LastFinished: &t1},
			{Name: "init", Kind: ContainerInit}, {Name: "proxy", Kind: ContainerSidecar, Restarts: -1}},
		FailedAt: &t2, Storage: true, JobTracking: true, Labels: map[string]string{LabelOptOut: "true", "": ""}, DisruptionReason: DisruptionEvictionByEvictionAPI}
}

func fullNode() NodeState {
	t1 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("x", 3600))
	return NodeState{Op: OpUpsert, UID: "node-uid", Name: "node-0001", ResourceVersion: "99",
		Labels: map[string]string{"kubernetes.io/hostname": "node-0001"}, Annotations: map[string]string{AnnotationAutoCordon: "true"},
		Unschedulable: true, Taints: []Taint{{Key: TaintOutOfService, Value: "nodeshutdown", Effect: "NoExecute"}, {Key: "a", Effect: "NoSchedule"}},
		Ready: "True", ReadySince: &t1, AllocatablePods: 110, EphemeralBytes: 100 << 30, Pods: 30, Evicting: 3,
		PodsResourceVersion: "98", ImageBytes: 12 << 30, ImageCount: 50, ImagesTruncated: true, Departed: 12, DepartedEvicted: 7,
		DepartedUnknown: 2, EvictionStreak: 3}
}

// TestFullStatesSetEveryField: the fixtures of the fast path set every
// field, so a field added to a state without a case in the decoder (which
// would skip it silently) fails TestDecodeFastPath.
func TestFullStatesSetEveryField(t *testing.T) {
	for _, v := range []any{fullPod(), fullNode()} {
		rv := reflect.ValueOf(v)
		for i := range rv.NumField() {
			if rv.Field(i).IsZero() {
				t.Errorf("%T.%s is not set in the fixture", v, rv.Type().Field(i).Name)
			}
		}
	}
}

// marshal is how the watcher encodes (envelope.Marshal: no HTML escaping).
func marshal(t testing.TB, v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// TestDecodeFastPath: what the watcher writes is read by the fast path,
// never by the encoding/json fallback, and gives the same states.
func TestDecodeFastPath(t *testing.T) {
	in := &Interner{}
	for _, p := range []PodState{fullPod(), {}, {Op: OpDelete, UID: "u", Namespace: "n", Name: "p"}} {
		data := marshal(t, p)
		d := decoder{b: data, in: in}
		got, ok := d.podState()
		if !ok {
			t.Fatalf("fast path gave up on %s", data)
		}
		if !reflect.DeepEqual(*got, p) {
			t.Fatalf("fast path decoded %s as %+v", data, got)
		}
	}
	for _, n := range []NodeState{fullNode(), {}, {Op: OpDelete, UID: "u", Name: "n"}} {
		data := marshal(t, n)
		var got NodeState
		d := decoder{b: data, in: in}
		if !d.node(&got) || !d.end() {
			t.Fatalf("fast path gave up on %s", data)
		}
		var want NodeState
		_ = json.Unmarshal(data, &want) // the zone's name does not survive JSON
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path decoded %s as %+v", data, got)
		}
	}
	// A newer watcher's extra field is skipped, not a reason to give up.
	data := []byte(`{"op":"upsert","future":{"a":[1,2.5e3,-0,true,false,null,"x\"\u00e9"]},"name":"p"}`)
	if d := (decoder{b: data}); func() bool { p, ok := d.podState(); return !ok || p.Name != "p" }() {
		t.Fatalf("unknown field: the fast path gave up on %s", data)
	}
}

// TestDecodeInterns: equal strings of two objects share one copy.
func TestDecodeInterns(t *testing.T) {
	in := &Interner{}
	p := fullPod()
	a, err := DecodePod(marshal(t, p), in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodePod(marshal(t, p), in)
	if err != nil {
		t.Fatal(err)
	}
	if a.Owner != b.Owner {
		t.Fatal("owner not shared")
	}
	if a.Namespace != b.Namespace || unsafeData(a.Namespace) != unsafeData(b.Namespace) ||
		unsafeData(a.Containers[0].LastReason) != unsafeData(b.Containers[0].LastReason) {
		t.Fatal("namespace and reasons not interned")
	}
}

// TestDecodeFallback: inputs the fast path leaves to encoding/json get
// encoding/json's answer.
func TestDecodeFallback(t *testing.T) {
	for _, in := range []string{
		`{"name":"a\"b"}`, `{"NAME":"x"}`, `{"name":"x","name":"y"}`, `{"owner":null}`, `{"finalizers":1.0}`,
		`{"containers":[{"restarts":2147483648}]}`, `{"name":"\xff"}`, `null`, `{"pvc":1}`, `{} x`, `{"labels":{"a":"b","a":"c"}}`,
		`{"creationTimestamp":"not a time"}`, `{"containers":[{"name":"a"},{"name":"b"}],"containers":[{"kind":"init"}]}`,
		`{"nodeName":"ſ"}`, `{"ſtatus":1}`, `{"finalizers":-9223372036854775808}`,
	} {
		var slow PodState
		fast, errFast := DecodePod([]byte(in), nil)
		errSlow := json.Unmarshal([]byte(in), &slow)
		if (errFast == nil) != (errSlow == nil) || !reflect.DeepEqual(*fast, slow) {
			t.Errorf("%s: fast %+v (%v), encoding/json %+v (%v)", in, fast, errFast, slow, errSlow)
		}
	}
}

// FuzzDecodeState compares the fast decoders with encoding/json on
// arbitrary input: the same error-or-not and the same value, always.
func FuzzDecodeState(f *testing.F) {
	f.Add(marshal(f, fullPod()))
	f.Add(marshal(f, fullNode()))
	f.Add([]byte(`{"op":"delete","uid":"u","containers":[],"labels":{},"taints":[],"owner":{}}`))
	f.Add([]byte(` {"pods": 3 , "future": [{"x": null}], "readySince": "2026-12-01T10:00:00+01:00"} `))
	f.Add([]byte(`{"Name":"x","ready":"\u0054rue","pods":1e2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var sp PodState
		fp, errF := DecodePod(data, fuzzInterner)
		errS := json.Unmarshal(data, &sp)
		if (errF == nil) != (errS == nil) || !reflect.DeepEqual(*fp, sp) {
			t.Fatalf("pod %q: fast %+v (%v), encoding/json %+v (%v)", data, fp, errF, sp, errS)
		}
		// Keyed, the same pod and the key back, whether the name shares it or not.
		for _, key := range []string{"kube.c.pod.ns." + sp.Name, "kube.c.pod.ns.other", strings.Repeat("k", 100)} {
			kp, k, errK := DecodePodKeyed(data, key, fuzzInterner)
			if (errK == nil) != (errS == nil) || !reflect.DeepEqual(*kp, sp) || k != key {
				t.Fatalf("pod %q under %q: keyed %+v %q (%v), encoding/json %+v (%v)", data, key, kp, k, errK, sp, errS)
			}
		}
		var sn NodeState
		fn, errF := DecodeNode(data, fuzzInterner)
		errS = json.Unmarshal(data, &sn)
		if (errF == nil) != (errS == nil) || !reflect.DeepEqual(*fn, sn) {
			t.Fatalf("node %q: fast %+v (%v), encoding/json %+v (%v)", data, fn, errF, sn, errS)
		}
	})
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }

// TestDecodePodKeyed: the key and the pod's own strings go into the pod's
// block when they fit (the name sharing the key's last token), and are
// allocated as DecodePod does when they do not.
func TestDecodePodKeyed(t *testing.T) {
	in := &Interner{}
	p := fullPod()
	p.Message = ""
	data := marshal(t, p)
	inBlock := func(got *PodState, s string) bool {
		start := uintptr(unsafe.Pointer(got))
		at := uintptr(unsafe.Pointer(unsafe.StringData(s)))
		return at >= start && at < start+unsafe.Sizeof(podBlock{})
	}
	key := "kube.c.pod.shop." + p.Name
	got, k, err := DecodePodKeyed(data, key, in)
	if err != nil || !reflect.DeepEqual(*got, p) || k != key {
		t.Fatalf("DecodePodKeyed = %+v %q %v", got, k, err)
	}
	if !inBlock(got, k) || !inBlock(got, got.UID) || unsafe.StringData(got.Name) != unsafe.StringData(k[len(k)-len(p.Name):]) {
		t.Fatal("key, uid and name are not in the pod's block, the name not in the key")
	}
	// A key too long for the block stays the caller's string; the rest as DecodePod.
	long := "kube.c.pod.shop." + strings.Repeat("x", 100)
	got, k, err = DecodePodKeyed(data, long, in)
	if err != nil || !reflect.DeepEqual(*got, p) || unsafe.StringData(k) != unsafe.StringData(long) || !inBlock(got, got.UID) {
		t.Fatalf("DecodePodKeyed with a long key = %+v %q %v", got, k, err)
	}
}

// benchPod is a pod as figure 3's KUBE holds it.
func benchPod(b *testing.B) []byte {
	finished := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	return marshal(b, PodState{Op: OpUpsert, UID: "00000000-0000-4000-8000-000000000042", Namespace: "ns-042",
		Name: "web-7d9f8c6b5-000042", ResourceVersion: "200042", NodeName: "node-0042", Phase: "Running",
		CreationTimestamp: finished.Add(-24 * time.Hour), Owner: &Owner{Kind: "Deployment", Name: "web-042"},
		Containers: []Container{{Name: "app", Restarts: 3, LastReason: "OOMKilled", LastExitCode: 137, LastFinished: &finished}, {Name: "proxy"}}})
}

func BenchmarkDecodePod(b *testing.B) {
	data := benchPod(b)
	in := &Interner{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodePod(data, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodePodEncodingJSON(b *testing.B) {
	data := benchPod(b)
	b.ReportAllocs()
	for b.Loop() {
		var p PodState
		if err := json.Unmarshal(data, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// fuzzInterner is shared by the fuzz inputs of one process: interning must
// give equal strings whatever it saw before.
var fuzzInterner = &Interner{}

// TestInternerShares: whatever the cache holds, equal strings come back as
// one copy, through both ways of a slot pair and the map behind them.
func TestInternerShares(t *testing.T) {
	in := &Interner{}
	first := map[string]*byte{}
	for round := range 3 {
		for i := range 6000 {
			s := fmt.Sprintf("node-%04d", i)
			var got string
			if i%2 == 0 {
				got = in.intern([]byte(s))
			} else {
				got = in.String(s)
			}
			if got != s {
				t.Fatalf("interned %q as %q", s, got)
			}
			if round == 0 {
				first[s] = unsafe.StringData(got)
			} else if unsafe.StringData(got) != first[s] {
				t.Fatalf("round %d: %q is another copy", round, s)
			}
			o := Owner{Kind: "Deployment", Name: s}
			if p := in.Owner(o); *p != o || in.Owner(o) != p {
				t.Fatalf("owner %+v not shared", o)
			}
		}
	}
}

// TestFieldsInWireOrder: each fast decoder's key list is its type's JSON
// keys in field order, the order encoding/json writes them (object looks for
// the next key there first; a list out of order would still decode, slowly).
func TestFieldsInWireOrder(t *testing.T) {
	for _, tc := range []struct {
		v any
		f *fields
	}{{PodState{}, podFields}, {Owner{}, ownerFields}, {Container{}, containerFields}, {NodeState{}, nodeFields}, {Taint{}, taintFields}} {
		typ := reflect.TypeOf(tc.v)
		var keys []string
		for i := range typ.NumField() {
			if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ","); name != "-" && name != "" {
				keys = append(keys, name)
			}
		}
		if !reflect.DeepEqual(keys, tc.f.names) {
			t.Errorf("%s: decoder lists %q, the type writes %q", typ.Name(), tc.f.names, keys)
		}
	}
}

package store

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/report/internal/images"
	"github.com/opswire/opswire/services/report/internal/restarts"
	"github.com/opswire/opswire/shared/natstest"
)

func openKV(t *testing.T) (context.Context, jetstream.KeyValue) {
	t.Helper()
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	kv, err := Open(ctx, js, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, js, 1); err != nil { // a second replica opening it
		t.Fatalf("second open: %v", err)
	}
	return ctx, kv
}

func TestLastTick(t *testing.T) {
	ctx, kv := openKV(t)
	s := New(kv, "prod")
	if _, ok, err := s.LastTick(ctx); ok || err != nil {
		t.Fatalf("fresh bucket: ok=%v err=%v", ok, err)
	}
	tick := time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)
	if err := s.SetLastTick(ctx, tick); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.LastTick(ctx)
	if err != nil || !ok || !got.Equal(tick) {
		t.Fatalf("LastTick = %s %v %v", got, ok, err)
	}
	if _, ok, _ := New(kv, "staging").LastTick(ctx); ok {
		t.Fatal("clusters must not share keys")
	}
}

func TestBaselineRoundTrip(t *testing.T) {
	ctx, kv := openKV(t)
	s := New(kv, "prod")
	if b, err := s.LoadBaseline(ctx); b != nil || err != nil {
		t.Fatalf("fresh bucket: %v %v", b, err)
	}
	t1 := time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)
	first := &restarts.Baseline{Time: t1, Pods: map[string]map[string]int32{
		"uid-a": {"app": 150, "proxy": 2}, "uid-b": {"app": 5},
	}}
	if err := s.SaveBaseline(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	loaded, err := s.LoadBaseline(ctx)
	if err != nil || !reflect.DeepEqual(loaded, first) {
		t.Fatalf("loaded %+v (%v), want %+v", loaded, err, first)
	}
	second := &restarts.Baseline{Time: t1.Add(time.Hour), Pods: map[string]map[string]int32{
		"uid-a": {"app": 160, "proxy": 2}, "uid-c": {"app": 1},
	}}
	if err := s.SaveBaseline(ctx, second, loaded); err != nil {
		t.Fatal(err)
	}
	loaded, err = s.LoadBaseline(ctx)
	if err != nil || !reflect.DeepEqual(loaded, second) {
		t.Fatalf("after update %+v (%v), want %+v (uid-b forgotten)", loaded, err, second)
	}
}

func TestImageMemory(t *testing.T) {
	ctx, kv := openKV(t)
	s := New(kv, "prod")
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	mems := map[string]images.Memory{
		"uid-a": {AlertedAt: at, AlertedBytes: 10, Active: true, Reason: "truncated", Node: "node.with.dots", UID: "uid-a"},
		"uid-b": {AlertedAt: at.Add(time.Minute), AlertedBytes: 20, Node: "plain", UID: "uid-b"},
	}
	for uid, m := range mems {
		if err := s.SaveImageMemory(ctx, uid, m); err != nil {
			t.Fatal(err)
		}
	}
	// An entry of the old format, keyed by node name without a uid, is purged.
	if _, err := kv.Put(ctx, "prod.images.old-node", []byte(`{"alertedBytes":5,"active":true}`)); err != nil {
		t.Fatal(err)
	}
	got, err := s.LoadImageMemory(ctx)
	if err != nil || !reflect.DeepEqual(got, mems) {
		t.Fatalf("loaded %+v (%v), want %+v", got, err, mems)
	}
	if _, err := kv.Get(ctx, "prod.images.old-node"); err == nil {
		t.Fatal("the old-format entry was not purged")
	}
	if err := s.DeleteImageMemory(ctx, "uid-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteImageMemory(ctx, "never-stored"); err != nil {
		t.Fatalf("deleting an unknown node: %v", err)
	}
	got, err = s.LoadImageMemory(ctx)
	if err != nil || len(got) != 1 || got["uid-a"] != mems["uid-a"] {
		t.Fatalf("after delete %+v (%v)", got, err)
	}
	if other, err := New(kv, "staging").LoadImageMemory(ctx); err != nil || len(other) != 0 {
		t.Fatalf("other cluster sees %v (%v)", other, err)
	}
}

// TestEveryClusterNameKeepsItsState: cluster.name accepts any NATS subject
// token, and KV keys allow far fewer characters (no ':', no Chinese). Every
// accepted name must store and read back its state, apart from every other
// cluster in the bucket, including one whose name looks like another's key.
func TestEveryClusterNameKeepsItsState(t *testing.T) {
	ctx, kv := openKV(t)
	names := []string{"prod", "eu:prod", "eu=3Aprod", "arn:aws:eks:eu-west-1:123456789012:cluster/prod", "北京生产", "上海-测试/1"}
	at := time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)
	for i, name := range names {
		s := New(kv, name)
		tick := at.Add(time.Duration(i) * time.Hour)
		b := &restarts.Baseline{Time: tick, Pods: map[string]map[string]int32{"pod-uid": {"app": int32(100 + i)}}}
		m := images.Memory{AlertedAt: tick, AlertedBytes: int64(i), Node: "node-" + name, UID: "node-uid"}
		if err := s.SetLastTick(ctx, tick); err != nil {
			t.Fatalf("cluster %q: %v", name, err)
		}
		if err := s.SaveBaseline(ctx, b, nil); err != nil {
			t.Fatalf("cluster %q: %v", name, err)
		}
		if err := s.SaveImageMemory(ctx, m.UID, m); err != nil {
			t.Fatalf("cluster %q: %v", name, err)
		}
		if err := s.SaveReportSizes(ctx, []int{i + 1}); err != nil {
			t.Fatalf("cluster %q: %v", name, err)
		}
	}
	for i, name := range names {
		s := New(kv, name)
		tick := at.Add(time.Duration(i) * time.Hour)
		if got, ok, err := s.LastTick(ctx); err != nil || !ok || !got.Equal(tick) {
			t.Errorf("cluster %q: last tick %s %v %v, want %s", name, got, ok, err, tick)
		}
		b, err := s.LoadBaseline(ctx)
		want := map[string]map[string]int32{"pod-uid": {"app": int32(100 + i)}}
		if err != nil || b == nil || !b.Time.Equal(tick) || !reflect.DeepEqual(b.Pods, want) {
			t.Errorf("cluster %q: baseline %+v (%v), want %v at %s", name, b, err, want, tick)
		}
		mem, err := s.LoadImageMemory(ctx)
		if err != nil || len(mem) != 1 || mem["node-uid"].Node != "node-"+name {
			t.Errorf("cluster %q: image memory %+v (%v), want only node-%s", name, mem, err, name)
		}
		if sizes, err := s.LoadReportSizes(ctx); err != nil || !reflect.DeepEqual(sizes, []int{i + 1}) {
			t.Errorf("cluster %q: report sizes %v (%v), want [%d]", name, sizes, err, i+1)
		}
		if err := s.DeleteImageMemory(ctx, "node-uid"); err != nil {
			t.Errorf("cluster %q: %v", name, err)
		}
	}
}

// TestPurgeMarkersDoNotAccumulate: every pod that leaves the baseline and
// every node whose alert memory is dropped leaves a purge marker in the
// bucket, one per pod UID that ever restarted, and every new leader's load
// reads them all. They must go, not pile up for ever; so must the markers
// an earlier build left without a TTL, once a leader loads them.
func TestPurgeMarkersDoNotAccumulate(t *testing.T) {
	old := markerTTL
	markerTTL = time.Second
	t.Cleanup(func() { markerTTL = old })
	_, js := natstest.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	// The bucket as a build before markerTTL made it, with its markers.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: Bucket, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"prod.baseline.pod.uid-gone-long-ago", "prod.images.node-uid-gone-long-ago"} {
		if _, err := kv.Put(ctx, key, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := kv.Purge(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if kv, err = Open(ctx, js, 1); err != nil {
		t.Fatalf("opening the bucket of an earlier build: %v", err)
	}
	s := New(kv, "prod")

	at := time.Date(2025, 1, 6, 2, 0, 0, 0, time.UTC)
	restarted := &restarts.Baseline{Time: at, Pods: map[string]map[string]int32{}}
	for i := range 50 {
		restarted.Pods[fmt.Sprintf("pod-uid-%d", i)] = map[string]int32{"app": 1}
	}
	if err := s.SaveBaseline(ctx, restarted, nil); err != nil {
		t.Fatal(err)
	}
	// Every one of those pods is gone by the next report.
	if err := s.SaveBaseline(ctx, &restarts.Baseline{Time: at.Add(time.Hour), Pods: map[string]map[string]int32{}}, restarted); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		uid := fmt.Sprintf("node-uid-%d", i)
		if err := s.SaveImageMemory(ctx, uid, images.Memory{Node: "n", UID: uid, AlertedAt: at}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteImageMemory(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	// Leaders come and go, each loading its state: the markers without a
	// TTL are old by the time one loads them (here, after 2 s).
	var held uint64
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, err := s.LoadBaseline(ctx); err != nil || b == nil || len(b.Pods) != 0 {
			t.Fatalf("baseline %+v (%v), want one without pods", b, err)
		}
		if m, err := s.LoadImageMemory(ctx); err != nil || len(m) != 0 {
			t.Fatalf("image memory %+v (%v), want none", m, err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if held = st.Values(); held == 1 {
			break // prod.baseline.time
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket holds %d messages 15 s after the purges, want 1 (prod.baseline.time): the purge markers stay", held)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if b, err := s.LoadBaseline(ctx); err != nil || b == nil || !b.Time.Equal(at.Add(time.Hour)) {
		t.Fatalf("baseline %+v (%v) after the markers went", b, err)
	}
}

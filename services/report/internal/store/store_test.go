package store

import (
	"context"
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

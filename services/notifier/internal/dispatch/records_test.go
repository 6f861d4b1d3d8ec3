package dispatch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/services/notifier/internal/dispatch"
	"github.com/opswire/opswire/shared/natstest"
	"github.com/opswire/opswire/shared/testkit"
)

// TestStatesBatched: the batched read (several requests of StatesBatch keys)
// answers what one KV get per key answers: delivered, dead-lettered, a value
// from before records had values (settled, replayable), a deleted key and a
// key never written (none), also for a key asked for twice; the records were
// written by Mark's asynchronous publishes.
func TestStatesBatched(t *testing.T) {
	e := newEnv(t, notifierConfig())
	ctx := context.Background()
	key := func(i int) string {
		return dispatch.DeliveredKey(cluster, "ops", "bot", fmt.Sprintf("cleanup/uid-%d/deleted", i))
	}
	kd := e.delivered()
	var delivered, dead []string
	for i := range 20 {
		delivered = append(delivered, key(i))
		dead = append(dead, key(100+i))
	}
	if err := kd.Mark(ctx, delivered, dispatch.RecordDelivered); err != nil {
		t.Fatal(err)
	}
	if err := kd.Mark(ctx, dead, dispatch.RecordDeadLettered); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Put(ctx, key(200), []byte{1}); err != nil { // an old record
		t.Fatal(err)
	}
	if _, err := e.kv.Put(ctx, key(201), []byte(dispatch.RecordDelivered)); err != nil {
		t.Fatal(err)
	}
	if err := e.kv.Delete(ctx, key(201)); err != nil {
		t.Fatal(err)
	}
	keys := []string{key(3), key(300), key(104), key(200), key(201), key(3), key(19), key(301), key(119), key(0)}
	want := []dispatch.Record{dispatch.RecordDelivered, dispatch.RecordNone, dispatch.RecordDeadLettered, dispatch.RecordDeadLettered,
		dispatch.RecordNone, dispatch.RecordDelivered, dispatch.RecordDelivered, dispatch.RecordNone, dispatch.RecordDeadLettered, dispatch.RecordDelivered}
	check := func(name string, d *dispatch.KVDelivered) {
		t.Helper()
		got, err := d.States(ctx, keys)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range keys {
			one, err := d.State(ctx, keys[i])
			if err != nil {
				t.Fatal(err)
			}
			if got[i] != want[i] || one != want[i] {
				t.Errorf("%s: key %d: States %q, State %q, want %q", name, i, got[i], one, want[i])
			}
		}
	}
	check("batched", kd)
	check("key by key", &dispatch.KVDelivered{KV: e.kv})
	none, err := kd.States(ctx, []string{key(400), key(401)}) // the server's "no results"
	if err != nil || none[0] != dispatch.RecordNone || none[1] != dispatch.RecordNone {
		t.Errorf("keys without records: %v %v", none, err)
	}

	// A server that does not answer direct gets (before 2.11 it would not
	// know the batch either): the same answers, key by key.
	info, err := e.js.Stream(ctx, "KV_"+dispatch.DeliveredBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	kv, err := e.js.KeyValue(ctx, dispatch.DeliveredBucket)
	if err != nil {
		t.Fatal(err)
	}
	check("no direct gets", &dispatch.KVDelivered{KV: kv, Async: e.records, StatesBatch: 3})
}

// TestMarkRewritesWhatAsyncLost: a record whose asynchronous write is not
// acknowledged in time is written again with a put; Mark fails only if that
// fails too.
func TestMarkRewritesWhatAsyncLost(t *testing.T) {
	e := newEnv(t, notifierConfig())
	ctx := context.Background()
	keys := []string{"bot.a", "bot.b", "bot.c", "bot.d"}
	// Every asynchronous write times out before its acknowledgement comes.
	impatient, err := dispatch.NewAsyncRecorder(e.nc, 64, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&dispatch.KVDelivered{KV: e.kv, Async: impatient}).Mark(ctx, keys, dispatch.RecordDelivered); err != nil {
		t.Fatal(err)
	}
	got, err := e.delivered().States(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r != dispatch.RecordDelivered {
			t.Errorf("%s: %q", keys[i], r)
		}
	}
	info, err := e.js.Stream(ctx, "KV_"+dispatch.DeliveredBucket)
	if err != nil {
		t.Fatal(err)
	}
	if last := info.CachedInfo().State.LastSeq; last <= uint64(len(keys)) {
		t.Errorf("stream holds %d writes of %d keys: the timed-out writes were not written again", last, len(keys))
	}

	// A bucket that is gone: the asynchronous writes and the puts fail.
	other, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteKeyValue(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := (&dispatch.KVDelivered{KV: other, Async: e.records}).Mark(ctx, keys, dispatch.RecordDelivered); err == nil {
		t.Fatal("Mark into a deleted bucket returned nil")
	}
}

// TestStatesWithoutBatchPermission: a NATS user that may not publish the
// batched read's subject (a deploy's permissions from before batched reads)
// gets the right records key by key: one read waits for the unanswered batch,
// the next ones do not try again.
func TestStatesWithoutBatchPermission(t *testing.T) {
	s := natstest.StartWithOptions(t, &server.Options{Users: []*server.User{{Username: "notifier", Password: "pw",
		Permissions: &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"},
			Deny: []string{"$JS.API.DIRECT.GET.KV_" + dispatch.DeliveredBucket}}}}}})
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("notifier", "pw"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := dispatch.EnsureDeliveredBucket(ctx, js, time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	records, err := dispatch.NewAsyncRecorder(nc, 64, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kd := &dispatch.KVDelivered{KV: kv, Async: records}
	if err := kd.Mark(ctx, []string{"bot.a", "bot.b"}, dispatch.RecordDelivered); err != nil {
		t.Fatal(err)
	}
	keys := []string{"bot.a", "bot.x", "bot.b"}
	for i, limit := range []time.Duration{10 * time.Second, time.Second} {
		start := time.Now()
		got, err := kd.States(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != dispatch.RecordDelivered || got[1] != dispatch.RecordNone || got[2] != dispatch.RecordDelivered {
			t.Errorf("read %d: %v", i, got)
		}
		if took := time.Since(start); took > limit {
			t.Errorf("read %d took %v", i, took)
		}
	}

	// Batching is tried again after BatchRetry (a batched read that timed
	// out on a loaded server must not turn it off for good): a read waits
	// for the refused batch again.
	kd = &dispatch.KVDelivered{KV: kv, Async: records, BatchRetry: 500 * time.Millisecond}
	retried := func() time.Duration {
		start := time.Now()
		got, err := kd.States(ctx, keys)
		if err != nil || got[0] != dispatch.RecordDelivered || got[1] != dispatch.RecordNone || got[2] != dispatch.RecordDelivered {
			t.Fatalf("%v %v", got, err)
		}
		return time.Since(start)
	}
	if took := retried(); took < time.Second {
		t.Fatalf("the first read took %v: no batched read was tried", took)
	}
	if took := retried(); took >= time.Second {
		t.Fatalf("a read right after the refused batch took %v: batched again", took)
	}
	testkit.Eventually(t, 10*time.Second, "batched reads tried again after BatchRetry", func() bool { return retried() >= time.Second })
}

// TestMarkEachReportsStoredRecords: MarkEach reports every key once, in
// chunks, and only once its record can be read back, whether written
// asynchronously, rewritten after a lost acknowledgement, or put; the
// dispatcher acks each message when its record is reported.
func TestMarkEachReportsStoredRecords(t *testing.T) {
	e := newEnv(t, notifierConfig())
	ctx := context.Background()
	impatient, err := dispatch.NewAsyncRecorder(e.nc, 64, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]*dispatch.KVDelivered{
		"async":     e.delivered(),
		"lost acks": {KV: e.kv, Async: impatient},
		"puts":      {KV: e.kv, Parallel: 8},
	} {
		keys := make([]string, 1234)
		for i := range keys {
			keys[i] = fmt.Sprintf("bot.%s-%d", strings.ReplaceAll(name, " ", "-"), i)
		}
		seen := make([]int, len(keys))
		reads := &dispatch.KVDelivered{KV: e.kv}
		err := d.MarkEach(ctx, keys, dispatch.RecordDelivered, func(idx []int) {
			if len(idx) > 500 {
				t.Errorf("%s: %d keys reported at once", name, len(idx))
			}
			// Each reported key is readable at once: the next reads see
			// a sample of them.
			got, err := reads.States(ctx, []string{keys[idx[0]], keys[idx[len(idx)-1]]})
			if err != nil || got[0] != dispatch.RecordDelivered || got[1] != dispatch.RecordDelivered {
				t.Errorf("%s: reported before stored: %v %v", name, got, err)
			}
			for _, i := range idx {
				seen[i]++
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("%s: key %d reported %d times", name, i, n)
			}
		}
	}
}

// Package watcher mirrors pods and nodes into the KUBE stream (DESIGN §2–4).
//
// Informer handlers only enqueue object keys. Workers read the current cached
// state, compare it with what was last stored, and publish only real changes
// of the compact state, so status heartbeats cost no NATS traffic. Because a
// worker always publishes the *current* state of a key, a publish that failed
// during a NATS outage is simply retried later with whatever is current then:
// the final state is never lost and no backlog of stale states builds up.
package watcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/opswire/opswire/services/watcher/internal/compact"
	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/subject"
)

// AsyncPublisher is the part of jetstream.JetStream the watcher publishes with.
type AsyncPublisher interface {
	PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// Options configure a Watcher.
type Options struct {
	Cluster      string
	Workers      int
	TombstoneTTL time.Duration
	// StallWait is how long a publish waits for room in the async window.
	StallWait time.Duration
	// MaxPayload is the server's message size limit (0: 1 MiB). A node state
	// over it keeps only the labels KeepNodeLabel selects; a state still over
	// it is reported (metric, log) and not retried until the object changes.
	MaxPayload int
	// KeepNodeLabel selects the node labels an oversized node state keeps
	// (the ones opswire reads); nil keeps only opswire's own keys.
	KeepNodeLabel func(key string) bool
	// RetryMax caps the backoff of a key whose publish failed (0: 5s;
	// tests shorten it to watch several retry periods quickly).
	RetryMax time.Duration
}

// headerRoom is left in a message for the CloudEvents headers.
const headerRoom = 2 << 10

// Queue keys: "p/<namespace>/<name>" for pods, "n/<name>" for nodes.
const (
	podPrefix  = "p/"
	nodePrefix = "n/"
	// byNode indexes counted (non-terminated, bound) pods by node name.
	byNode = "byNode"
	// evictingOnNode indexes the counted pods being evicted through the
	// Eviction API by node name (NodeState.Evicting).
	evictingOnNode = "evictingOnNode"
)

// record is what was last stored for a key: enough to detect change and to
// write a tombstone, without keeping a second copy of the state.
type record struct {
	hash uint64
	uid  string
	node string // pods: the node this pod counts on ("" if none)
	// doubt: a publish of this key failed or timed out, so KUBE may hold
	// the state it carried, or not. The next sync of the key publishes
	// whatever is current, a tombstone if the object is gone.
	doubt bool
	// evicting: the pod counts on node and is being evicted through the
	// Eviction API (it then also counts in the node's Evicting).
	evicting bool
	// exempt: the pod is owned by a DaemonSet or is a mirror pod (owned by
	// its Node): kubectl drain never evicts it, and its departure is not
	// counted in the node's totals (NodeState.Departed).
	exempt bool
	// left: nodes only, the departure totals the stored state carries
	// (NodeState.Departed/DepartedEvicted), to carry on counting from.
	left departures
	// pods: nodes only, the pod count the stored state carries.
	pods int
	// seeded: nodes only, the record is the state KUBE held when the term
	// started (LoadSeed), not one this term stored.
	seeded bool
}

// departures are a node's running totals of pods that stopped counting on it
// (NodeState.Departed, DepartedEvicted, DepartedUnknown, EvictionStreak).
type departures struct{ all, evicted, unknown, streak int }

// How a pod left its node, as far as the watcher saw.
type leftAs int

const (
	leftPlain   leftAs = iota // deleted or terminated, not through the Eviction API
	leftEvicted               // its last state had DisruptionTarget/EvictionByEvictionAPI
	leftUnknown               // its final state was never seen (gone while away, or a relist's tombstone)
)

// drainExempt reports a pod kubectl drain never evicts: owned by a DaemonSet,
// or a mirror (static) pod, which the kubelet has owned by its Node.
func drainExempt(s *events.PodState) bool {
	return s.Owner != nil && (s.Owner.Kind == "DaemonSet" || s.Owner.Kind == "Node")
}

// Watcher turns informer events into KUBE messages.
type Watcher struct {
	opts   Options
	source string
	log    zerolog.Logger
	pods   cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	pub    AsyncPublisher
	// q is the current term's queue: a term shuts its queue down when it
	// ends, and the next term (a replica that lost the lease and won it
	// again) starts with a new one.
	q atomic.Pointer[workqueue.TypedRateLimitingInterface[string]]
	// running: a term is publishing. Outside a term the handlers enqueue
	// nothing: Run queues every cached key when a term starts, so a standby
	// (or the initial list) does not fill a queue whose sets would keep their
	// peak size for the life of the process (feed.go).
	running atomic.Bool
	m       *metrics

	mu        sync.Mutex
	published *records
	// trimmed names the nodes published with their labels filtered, so the
	// warning is logged once per node, not on every recount.
	trimmed map[string]bool
	// left holds each node's departure totals (NodeState.Departed): a
	// departure is counted when the pod's sync first sees that it no longer
	// counts on its node, before the node is recounted, so no node state
	// shows the lower count without the departure.
	left map[string]departures
	// leaving holds the uids of pods whose departure is counted but whose new
	// state (tombstone or terminated) is not stored yet: a retried publish
	// must not count it again.
	leaving map[string]bool
	// deleted holds the delete notes (deleteNote): what each pod's delete
	// event showed of its final state, for the sync that finds it gone.
	deleted deleteNotes
	// now is the clock of the notes' generations (tests move it).
	now func() time.Time
	// onNode counts, per node, the pods the watcher's pod syncs last saw
	// counting on it; the sync that counts a departure lowers it. A node whose
	// index holds fewer pods has departures whose pod syncs have not run yet
	// (the informer updates its index before the handlers run), and its
	// recount waits for them briefly (deferred), so a node state never shows
	// the lower count without the departure.
	onNode   map[string]int
	deferred map[string]int
	// exemptLeft counts, per node, the departures of exempt pods this term:
	// they lower the count without adding to the totals (accountForFall).
	exemptLeft map[string]int
	acks       chan pending
	// The options of every publish, built once: with the async window
	// full, a publish waits for room instead of failing (a failure would
	// only requeue the key with a backoff, seen in benchmarks); a tombstone
	// also carries its TTL.
	upsertOpts, deleteOpts []jetstream.PublishOpt
}

type pending struct {
	key  string
	kind string
	rec  record
	op   events.Op
	// departed is the uid of a pod whose counted departure this publish
	// stores (its tombstone or terminated state); "" for none.
	departed string
	// name is the cached pod's Name the record is filed under
	// (records.setNamed); "" for nodes and tombstones.
	name    string
	future  jetstream.PubAckFuture
	started time.Time
}

// New wires handlers into the informers. The informers must have been built
// with compact.PodTransform / compact.NodeTransform.
func New(pods, nodes cache.SharedIndexInformer, pub AsyncPublisher, opts Options, log zerolog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	if opts.Workers < 1 {
		opts.Workers = 1
	}
	if opts.StallWait <= 0 {
		opts.StallWait = 5 * time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = 5 * time.Second
	}
	w := &Watcher{
		opts: opts, source: envelope.Source(opts.Cluster, "watcher"), log: log,
		pods: pods, nodes: nodes, pub: pub,
		published: newRecords(),
		trimmed:   map[string]bool{},
		left:      map[string]departures{}, leaving: map[string]bool{},
		deleted: newDeleteNotes(time.Now()), now: time.Now,
		onNode: map[string]int{}, deferred: map[string]int{}, exemptLeft: map[string]int{},
		acks: make(chan pending, 8192),
	}
	w.upsertOpts = []jetstream.PublishOpt{jetstream.WithStallWait(opts.StallWait)}
	w.deleteOpts = []jetstream.PublishOpt{jetstream.WithStallWait(opts.StallWait), jetstream.WithMsgTTL(opts.TombstoneTTL)}
	w.newQueue()
	w.m = newMetrics(reg, func() float64 { return float64(w.queue().Len()) })
	if err := pods.AddIndexers(cache.Indexers{byNode: countedOnNode, evictingOnNode: evictingOn}); err != nil {
		return nil, fmt.Errorf("pod index: %w", err)
	}
	if _, err := pods.AddEventHandler(w.handler("pod", podKey, w.noteDeleted)); err != nil {
		return nil, err
	}
	if _, err := nodes.AddEventHandler(w.handler("node", nodeKey, nil)); err != nil {
		return nil, err
	}
	return w, nil
}

// newQueue starts a term's queue.
func (w *Watcher) newQueue() {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](min(50*time.Millisecond, w.opts.RetryMax), w.opts.RetryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "watcher"})
	w.q.Store(&q)
}

func (w *Watcher) queue() workqueue.TypedRateLimitingInterface[string] { return *w.q.Load() }

// countedOnNode indexes a pod under its node while it occupies a slot there.
func countedOnNode(obj any) ([]string, error) {
	p, ok := obj.(*compact.Pod)
	if !ok || p.State.NodeName == "" || p.State.Terminated() {
		return nil, nil
	}
	return []string{p.State.NodeName}, nil
}

// evictingOn indexes a counted pod under its node while it is being evicted
// through the Eviction API.
func evictingOn(obj any) ([]string, error) {
	p, ok := obj.(*compact.Pod)
	if !ok || !p.State.EvictedByAPI() {
		return nil, nil
	}
	return countedOnNode(obj)
}

func podKey(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return podPrefix + t.Key
	}
	p := obj.(*compact.Pod)
	return podPrefix + p.State.Namespace + "/" + p.State.Name
}

func nodeKey(obj any) string {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return nodePrefix + t.Key
	}
	return nodePrefix + obj.(*compact.Node).State.Name
}

// handler only counts and enqueues; it never touches cached objects.
// deleted, if set, is told of each delete event's final state first.
func (w *Watcher) handler(kind string, key func(any) string, deleted func(key string, obj any)) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			w.m.received.WithLabelValues(kind, "add").Inc()
			w.enqueue(key(obj))
		},
		UpdateFunc: func(old, cur any) {
			if rv(old) == rv(cur) {
				return // periodic resync: nothing new
			}
			w.m.received.WithLabelValues(kind, "update").Inc()
			w.enqueue(key(cur))
		},
		DeleteFunc: func(obj any) {
			w.m.received.WithLabelValues(kind, "delete").Inc()
			k := key(obj)
			if deleted != nil {
				deleted(k, obj)
			}
			w.enqueue(k)
		},
	}
}

// noteDeleted notes what a pod's delete event shows of its final state
// (deleteNote). It reads the object the informer hands over and keeps only
// its uid.
func (w *Watcher) noteDeleted(key string, obj any) {
	t, tomb := obj.(cache.DeletedFinalStateUnknown)
	if tomb {
		obj = t.Obj
	}
	p, ok := obj.(*compact.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// A copy: the note outlives the deleted pod's cached block, which its uid
	// lies in (records.refresh).
	w.deleted.add(key, strings.Clone(p.State.UID), !tomb, p.State.EvictedByAPI(), w.now())
}

// forgetDeleted drops the delete notes of key. Callers hold w.mu.
func (w *Watcher) forgetDeleted(key string) { w.deleted.forget(key) }

// depart counts the departure of pod uid from node, once per pod. An exempt
// pod (drainExempt) is not counted in the totals.
func (w *Watcher) depart(uid, node string, how leftAs, exempt bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.leaving[uid] {
		return
	}
	// A copy: uid may lie in the block of a cached pod that is gone or
	// replaced (records.refresh), and the entry lasts until the ack.
	w.leaving[strings.Clone(uid)] = true
	w.onNode[node]--
	if exempt {
		w.exemptLeft[node]++
		w.m.departed.WithLabelValues("exempt").Inc()
		return
	}
	d := w.left[node]
	d.all++
	switch how {
	case leftEvicted:
		d.evicted++
		d.streak++
		w.m.departed.WithLabelValues("evicted").Inc()
	case leftUnknown:
		d.unknown++
		d.streak++
		w.m.departed.WithLabelValues("unknown").Inc()
	default:
		d.streak = 0
		w.m.departed.WithLabelValues("plain").Inc()
	}
	w.left[node] = d
}

// Deferred node recounts: a node waits for the pod syncs of its departures
// at most maxNodeDeferrals times nodeDeferral in a row, then is published
// anyway (should onNode ever be off, a node is delayed, never stopped).
const (
	nodeDeferral     = 20 * time.Millisecond
	maxNodeDeferrals = 5
)

func rv(obj any) string {
	switch o := obj.(type) {
	case *compact.Pod:
		return o.State.ResourceVersion
	case *compact.Node:
		return o.State.ResourceVersion
	}
	return ""
}

// Run publishes until ctx ends. Caches must be synced. It first loads what
// KUBE already holds (seed), so a restarted watcher republishes only what
// changed while it was away, and writes tombstones for objects deleted meanwhile.
func (w *Watcher) Run(ctx context.Context, seed map[string]record) error {
	// A later term (this replica lost the lease and won it again) starts
	// afresh, as a new process would: what KUBE holds now, a new queue.
	if w.queue().ShuttingDown() {
		w.newQueue()
	}
	w.acks = make(chan pending, cap(w.acks))
	w.mu.Lock()
	w.published = newRecords()
	// Departure totals carry on from the stored node states; a departure a
	// previous term counted but never stored is counted again from the seed.
	w.left, w.leaving = map[string]departures{}, map[string]bool{}
	w.onNode, w.deferred, w.exemptLeft = map[string]int{}, map[string]int{}, map[string]int{}
	w.trimmed = map[string]bool{}
	// Notes made while no term ran (a standby's) matter only for pods KUBE
	// still holds alive: those whose tombstone no leader stored.
	w.deleted.keepSeeded(seed)
	for k, r := range seed {
		if name, ok := strings.CutPrefix(k, nodePrefix); ok {
			w.left[name] = r.left
			r.seeded = true // accountForFall
		}
		w.published.set(k, r)
		if r.node != "" {
			w.onNode[r.node]++
		}
	}
	w.mu.Unlock()
	// From here on the handlers enqueue; every key cached before is listed
	// below (the informer updates its store before it calls the handlers).
	w.running.Store(true)
	defer w.running.Store(false)
	podKeys, nodeKeys := w.pods.GetIndexer().ListKeys(), w.nodes.GetIndexer().ListKeys()
	w.log.Info().Int("seeded", len(seed)).Int("pods", len(podKeys)).Int("nodes", len(nodeKeys)).Msg("publishing")

	var wg sync.WaitGroup
	ackDone := make(chan struct{})
	go func() { defer close(ackDone); w.collectAcks() }()
	for i := 0; i < w.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.processNext(ctx) {
			}
		}()
	}
	feedDone := make(chan struct{})
	go func() {
		defer close(feedDone)
		w.feed(ctx, podKeys, nodeKeys, seed)
	}()
	<-ctx.Done()
	<-feedDone
	w.queue().ShutDownWithDrain()
	wg.Wait()
	close(w.acks)
	<-ackDone
	return nil
}

func (w *Watcher) processNext(ctx context.Context) bool {
	key, shutdown := w.queue().Get()
	if shutdown {
		return false
	}
	if ctx.Err() != nil {
		w.queue().Done(key)
		return true
	}
	if err := w.sync(key); err != nil {
		if errors.Is(err, errOversized) || errors.Is(err, nats.ErrMaxPayload) {
			// No retry can make it fit: report it once per change of the
			// object instead of retrying blind. Its next change (or its
			// node's next recount) tries again.
			w.m.oversized.WithLabelValues(kindOf(key)).Inc()
			w.log.Error().Err(err).Str("key", key).Int("maxPayload", w.maxPayload()).
				Msg("state too large for one NATS message; KUBE keeps the previous state of this object until it changes")
			w.queue().Forget(key)
			w.queue().Done(key)
			return true
		}
		w.m.errors.WithLabelValues(kindOf(key)).Inc()
		w.log.Debug().Err(err).Str("key", key).Msg("publish failed; will retry")
		w.queue().Done(key)
		w.queue().AddRateLimited(key)
	}
	return true
}

func kindOf(key string) string {
	if strings.HasPrefix(key, podPrefix) {
		return "pod"
	}
	return "node"
}

// sync publishes the current state of one key if it changed. On success the
// key stays "processing" until its ack arrives (collectAcks calls Done), so
// one object never has two publishes in flight.
func (w *Watcher) sync(key string) error {
	if strings.HasPrefix(key, podPrefix) {
		return w.syncPod(key)
	}
	return w.syncNode(key)
}

func (w *Watcher) syncPod(key string) error {
	storeKey := strings.TrimPrefix(key, podPrefix)
	obj, exists, err := w.pods.GetIndexer().GetByKey(storeKey)
	if err != nil {
		return err
	}
	w.mu.Lock()
	prev, had := w.published.get(key)
	note := w.deleted.get(key)
	if !exists && !had {
		w.forgetDeleted(key)
	}
	w.mu.Unlock()
	deletedEvicting := note.evicted != "" && note.evicted == prev.uid
	deleteSeen := note.seen != "" && note.seen == prev.uid
	ns, name, _ := strings.Cut(storeKey, "/") // storeKey is also the ce-subject, <ns>/<name>
	if !exists {
		if !had {
			w.queue().Done(key)
			return nil
		}
		// The record's uid lies in the deleted pod's block (records.refresh):
		// what the tombstone's publish keeps (pending, doubt) holds a copy.
		prev.uid = strings.Clone(prev.uid)
		state := events.PodState{Op: events.OpDelete, UID: prev.uid, Namespace: ns, Name: name}
		departed := ""
		if prev.node != "" {
			// Counted before the node is recounted (queued just below).
			// Gone without a delete event that carried its final state
			// (gone while no watcher ran, or a relist's tombstone): it may
			// have been evicted, and counts as unknown.
			evicted := prev.evicting || deletedEvicting
			how := leftPlain
			switch {
			case evicted:
				how = leftEvicted
			case !deleteSeen:
				how = leftUnknown
			}
			w.depart(prev.uid, prev.node, how, prev.exempt)
			departed = prev.uid
			if evicted {
				state.DisruptionReason = events.DisruptionEvictionByEvictionAPI
			}
			w.queue().Add(nodePrefix + prev.node)
		}
		return w.publishPod(key, subject.Pod(w.opts.Cluster, ns, name), "pod/"+prev.uid+"/delete",
			storeKey, &state, record{uid: prev.uid}, events.OpDelete, departed)
	}
	p := obj.(*compact.Pod)
	state := p.State // a copy: the cached object is never modified
	contrib := ""
	if state.NodeName != "" && !state.Terminated() {
		contrib = state.NodeName
	}
	evicting := contrib != "" && state.EvictedByAPI()
	departed := ""
	if had && prev.node != "" && (prev.uid != state.UID || contrib != prev.node) {
		// The pod stopped counting on its node (it terminated, or another pod
		// of the same name replaced it): a departure, counted before the node
		// is recounted.
		// A pod replaced by another of the same name left without its final
		// state seen unless a delete event carried it.
		evicted := prev.evicting || deletedEvicting || (prev.uid == state.UID && state.EvictedByAPI())
		how := leftPlain
		switch {
		case evicted:
			how = leftEvicted
		case prev.uid != state.UID && !deleteSeen:
			how = leftUnknown
		}
		w.depart(prev.uid, prev.node, how, prev.exempt)
		departed = prev.uid
		if deletedEvicting || deleteSeen {
			w.mu.Lock()
			w.forgetDeleted(key)
			w.mu.Unlock()
		}
	}
	if contrib != "" && (!had || prev.node != contrib || prev.uid != state.UID) {
		w.mu.Lock()
		w.onNode[contrib]++
		w.mu.Unlock()
	}
	if contrib != prev.node || evicting != prev.evicting || departed != "" {
		for _, n := range []string{prev.node, contrib} {
			if n != "" {
				w.queue().Add(nodePrefix + n)
			}
		}
	}
	rec := record{hash: hashPodRV(&state), uid: state.UID, node: contrib, evicting: evicting, exempt: drainExempt(&state)}
	if had && !prev.doubt && prev.hash == rec.hash && prev.uid == rec.uid {
		w.mu.Lock()
		w.published.refresh(key, state.Name, state.UID)
		w.mu.Unlock()
		w.m.unchanged.WithLabelValues("pod").Inc()
		w.queue().Forget(key)
		w.queue().Done(key)
		return nil
	}
	return w.publishPod(key, subject.Pod(w.opts.Cluster, ns, name), "pod/"+state.UID+"/"+state.ResourceVersion,
		storeKey, &state, rec, events.OpUpsert, departed)
}

// publishPod publishes a pod's state; departed names the pod whose counted
// departure it stores (see Watcher.leaving). The state is passed by pointer
// (it encodes the same) so that it is not copied again onto the heap.
func (w *Watcher) publishPod(key, subj, id, ceSubject string, state *events.PodState, rec record, op events.Op, departed string) error {
	name := ""
	if op != events.OpDelete {
		name = state.Name // lies in the cached pod's block, as rec.uid does
	}
	return w.publishWith(key, "pod", subj, id, events.TypePod, ceSubject, state, rec, op, departed, name)
}

func (w *Watcher) syncNode(key string) error {
	name := strings.TrimPrefix(key, nodePrefix)
	obj, exists, err := w.nodes.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	w.mu.Lock()
	prev, had := w.published.get(key)
	w.mu.Unlock()
	if !exists {
		if !had {
			w.queue().Done(key)
			return nil
		}
		w.mu.Lock()
		delete(w.trimmed, name)
		delete(w.left, name)
		w.mu.Unlock()
		state := events.NodeState{Op: events.OpDelete, UID: prev.uid, Name: name}
		return w.publish(key, "node", subject.Node(w.opts.Cluster, name), "node/"+prev.uid+"/delete",
			events.TypeNode, name, state, record{}, events.OpDelete)
	}
	n := obj.(*compact.Node)
	state := n.State
	keys, err := w.pods.GetIndexer().IndexKeys(byNode, name)
	if err != nil {
		return err
	}
	state.Pods = len(keys)
	if keys, err = w.pods.GetIndexer().IndexKeys(evictingOnNode, name); err != nil {
		return err
	}
	state.Evicting = len(keys)
	state.PodsResourceVersion = w.pods.LastSyncResourceVersion()
	w.mu.Lock()
	wait := w.onNode[name] > state.Pods && w.deferred[name] < maxNodeDeferrals
	if wait {
		w.deferred[name]++
	} else {
		delete(w.deferred, name)
	}
	left := w.left[name]
	w.mu.Unlock()
	if wait {
		// Pods left the index whose syncs have not counted their
		// departures yet; each of those syncs queues this node again.
		w.m.deferred.Inc()
		w.queue().Done(key)
		w.queue().AddAfter(key, nodeDeferral)
		return nil
	}
	if had && prev.seeded {
		left = w.accountForFall(name, prev, state.Pods)
	}
	state.Departed, state.DepartedEvicted = left.all, left.evicted
	state.DepartedUnknown, state.EvictionStreak = left.unknown, left.streak
	size := jsonSize(state)
	oversized := size > w.maxPayload()-headerRoom
	if oversized {
		// Thousands of labels: keep those opswire reads.
		state.Labels = keepLabels(state.Labels, w.opts.KeepNodeLabel)
	}
	w.mu.Lock()
	warn := oversized && !w.trimmed[name]
	if oversized {
		w.trimmed[name] = true
	} else {
		delete(w.trimmed, name)
	}
	w.mu.Unlock()
	if warn {
		w.log.Warn().Str("node", name).Int("bytes", size).Int("labelsKept", len(state.Labels)).
			Msg("node state over the NATS message size: publishing only the labels opswire reads")
	}
	rec := record{hash: hashNode(state), uid: state.UID, left: left, pods: state.Pods}
	if had && !prev.doubt && prev.hash == rec.hash && prev.uid == rec.uid {
		w.m.unchanged.WithLabelValues("node").Inc()
		w.queue().Forget(key)
		w.queue().Done(key)
		return nil
	}
	// A node's state also changes through pod events (its count), which do not
	// change the node's resourceVersion. The id therefore carries the newest
	// resourceVersion the watcher has seen plus the state's hash: it never
	// repeats for a new state (10 → 9 → 10 pods gets three ids) and repeats
	// for the same state, which the server then deduplicates.
	latest := maxRV(state.ResourceVersion, state.PodsResourceVersion)
	id := "node/" + state.UID + "/" + latest + "/" + strconv.FormatUint(rec.hash&0xffffffff, 16)
	return w.publish(key, "node", subject.Node(w.opts.Cluster, name), id, events.TypeNode, name, state, rec, events.OpUpsert)
}

// accountForFall keeps, at a node's first recount in a term, the contract
// the cordon actor relies on (docs/watcher.md, Departures): a stored node
// state never shows its pod count lower than the previous stored state's by
// more than its departure total rose. Pods whose tombstones the previous term
// stored but whose departures no node state carried (a watcher killed between
// the two publishes), and pods KUBE never held that left while no term ran,
// are counted here as departures of unknown final state: they may have been
// evictions of a drain, and a release decided on the lower count alone would
// uncordon a node being drained. The pod syncs fed before the nodes (feed)
// have counted every departure the seed can show, so what is left is only
// those. A DaemonSet's pod lost that way counts too (it is never counted
// otherwise): one extra unknown departure leans toward a handover, never
// toward a release. Callers hold no lock.
func (w *Watcher) accountForFall(name string, prev record, pods int) departures {
	w.mu.Lock()
	defer w.mu.Unlock()
	left := w.left[name]
	lost := (prev.pods - pods) - (left.all - prev.left.all) - w.exemptLeft[name]
	if lost > 0 {
		left.all += lost
		left.unknown += lost
		left.streak += lost
		w.left[name] = left
		w.m.departed.WithLabelValues("unknown").Add(float64(lost))
	}
	return left
}

func (w *Watcher) publish(key, kind, subj, id, typ, ceSubject string, payload any, rec record, op events.Op) error {
	return w.publishWith(key, kind, subj, id, typ, ceSubject, payload, rec, op, "", "")
}

func (w *Watcher) publishWith(key, kind, subj, id, typ, ceSubject string, payload any, rec record, op events.Op, departed, name string) error {
	ev, err := envelope.New(id, w.source, typ, ceSubject, payload, time.Now())
	if err != nil {
		return err
	}
	if len(ev.Data) > w.maxPayload()-headerRoom {
		return fmt.Errorf("%w: %d bytes", errOversized, len(ev.Data))
	}
	opts := w.upsertOpts
	if op == events.OpDelete {
		opts = w.deleteOpts
	}
	start := time.Now()
	fut, err := w.pub.PublishMsgAsync(ev.Msg(subj), opts...)
	if err != nil {
		if !errors.Is(err, nats.ErrMaxPayload) {
			// Refused before it was sent (while disconnected: the
			// connection buffers nothing, app.Spec.NoPublishBuffer), and
			// settled as a failed ack is, so that the retry and a later
			// delete see what this sync counted: the pod on its node
			// (onNode, else counted again at every attempt) and its uid
			// for the tombstone. An oversized state is not retried.
			w.markDoubt(key, name, rec, op, departed)
		}
		return err
	}
	w.acks <- pending{key: key, kind: kind, rec: rec, op: op, departed: departed, name: name, future: fut, started: start}
	return nil
}

// collectAcks settles publishes in order: success records the state and
// releases the key; failure releases it for a rate-limited retry.
func (w *Watcher) collectAcks() {
	for p := range w.acks {
		select {
		case <-p.future.Ok():
			w.m.latency.Observe(time.Since(p.started).Seconds())
			w.m.published.WithLabelValues(p.kind, string(p.op)).Inc()
			w.mu.Lock()
			if p.op == events.OpDelete {
				w.published.del(p.key)
				w.deleted.settled(p.key, p.rec.uid)
			} else {
				w.published.setNamed(p.key, p.name, p.rec)
			}
			// KUBE now says the departed pod no longer counts on its node:
			// later syncs cannot see it leave again.
			delete(w.leaving, p.departed)
			w.mu.Unlock()
			w.queue().Forget(p.key)
			w.queue().Done(p.key)
		case err := <-p.future.Err():
			w.m.errors.WithLabelValues(p.kind).Inc()
			w.log.Debug().Err(err).Str("key", p.key).Msg("publish not acknowledged; will retry")
			w.markDoubt(p.key, p.name, p.rec, p.op, p.departed)
			w.queue().Done(p.key)
			w.queue().AddRateLimited(p.key)
		}
	}
}

// errOversized: a state that cannot fit in one NATS message.
var errOversized = errors.New("state larger than the NATS max payload")

func (w *Watcher) maxPayload() int {
	if w.opts.MaxPayload > 0 {
		return w.opts.MaxPayload
	}
	return 1 << 20
}

func jsonSize(v any) int {
	b, _ := json.Marshal(v)
	return len(b)
}

// keepLabels returns the labels keep selects, plus opswire's own keys.
func keepLabels(labels map[string]string, keep func(string) bool) map[string]string {
	var out map[string]string
	for k, v := range labels {
		if strings.HasPrefix(k, "opswire.io/") || knownNodeLabels[k] || (keep != nil && keep(k)) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// knownNodeLabels are the node labels the actors read whatever the configuration.
var knownNodeLabels = map[string]bool{
	events.LabelAutoCordon: true, events.LabelDoNotCordon: true,
	events.LabelControlPlane: true, events.LabelMaster: true,
}

// markDoubt records that a publish of key may or may not have been stored
// (a timed-out publish may still be stored, even after a reconnect). Without
// this, a pod created and deleted while its publishes time out would leave
// the watcher with no record of it, hence no tombstone and no recount of its
// node, and KUBE with a ghost if the first publish was stored after all.
// With it, KUBE converges to the API's state whatever the outcome was: the
// key is published again (its hash can no longer match), a deleted object
// gets its tombstone (with the uid the lost publish carried), and a pod's
// node is recounted.
//
// departed is the pod whose counted departure the publish stored (pending).
func (w *Watcher) markDoubt(key, name string, rec record, op events.Op, departed string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, had := w.published.get(key)
	if op == events.OpDelete {
		// The tombstone may not be stored: keep what was there, retried as
		// is, with a copy of its uid: the record's uid lies in the deleted
		// pod's cached block, which a NATS outage would keep alive else.
		if had {
			prev.doubt = true
			prev.uid = strings.Clone(prev.uid)
			w.published.set(key, prev)
		}
		return
	}
	d := rec
	d.doubt = true
	if had && d.node == "" && prev.uid == rec.uid {
		// Still recount the node the pod counted on before; the retry sees
		// it leave again, which leaving makes no second departure. Only
		// for the same pod: a new pod of the same name (a StatefulSet's,
		// re-created while its predecessor's departure is being stored)
		// never counted there, and would be counted as a plain departure
		// of its own, ending the node's eviction streak.
		d.node = prev.node
	}
	if departed != "" && departed != d.uid {
		// The record no longer names the departed pod, so no retry can
		// count it again: nothing is left to guard, and nothing else would
		// clear it.
		delete(w.leaving, departed)
	}
	w.published.setNamed(key, name, d)
}

// hashPod hashes the state without its resourceVersion, which changes on
// every write (heartbeats included) while the compact state may not.
func hashPod(s events.PodState) uint64 {
	return hashPodRV(&s)
}

// hashPodRV is hashPod of *s without a copy of it (s is as it was after).
func hashPodRV(s *events.PodState) uint64 {
	rv := s.ResourceVersion
	s.ResourceVersion = ""
	h := hashJSON(s)
	s.ResourceVersion = rv
	return h
}

func hashNode(s events.NodeState) uint64 {
	s.ResourceVersion, s.PodsResourceVersion = "", ""
	return hashJSON(s)
}

// hashJSON is the FNV-64a of json.Marshal(v), encoded into a pooled buffer
// so that hashing allocates nothing of its own (every pod change is hashed).
func hashJSON(v any) uint64 {
	s := hashPool.Get().(*hashScratch)
	defer func() {
		if s.buf.Cap() <= 64<<10 { // a rare huge node state is not kept by the pool
			hashPool.Put(s)
		}
	}()
	s.buf.Reset()
	_ = s.enc.Encode(v)
	// Encode ends with a newline json.Marshal does not write: the hash is of
	// the same bytes as before.
	b := bytes.TrimSuffix(s.buf.Bytes(), []byte("\n"))
	var h uint64 = 14695981039346656037 // FNV-64a, as hash/fnv
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

type hashScratch struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var hashPool = sync.Pool{New: func() any {
	s := &hashScratch{}
	s.enc = json.NewEncoder(&s.buf)
	return s
}}

// maxRV returns the larger of two resourceVersions (etcd revisions).
func maxRV(a, b string) string {
	ai, errA := strconv.ParseUint(a, 10, 64)
	bi, errB := strconv.ParseUint(b, 10, 64)
	switch {
	case errA != nil:
		return b
	case errB != nil || ai >= bi:
		return a
	}
	return b
}

package watcher

import (
	"context"
	"strings"
	"time"

	"k8s.io/client-go/tools/cache"
)

// feedWindow bounds how many keys the initial feed of a term keeps queued.
// A workqueue's sets (dirty, processing) are maps, which never shrink: queuing
// all 155,000 keys of a 150k-pod cluster at once kept ~10 MB of empty map for
// the life of the process. Fed through a window, the sets stay at a few
// thousand keys, which the workers drain faster than the window refills.
const feedWindow = 2048

// feedPoll is how often a full window is looked at again.
const feedPoll = time.Millisecond

// enqueue queues key during a term; outside one it is dropped, since the next
// term's feed queues every cached key anyway.
func (w *Watcher) enqueue(key string) {
	if w.running.Load() {
		w.queue().Add(key)
	}
}

// feed queues a term's initial keys, keeping at most feedWindow of them
// waiting: every cached pod, then every pod only KUBE holds (gone while no
// term ran: its sync counts its departure and stores its tombstone), then
// every cached node, then every node only KUBE holds. Pods go first so that
// a node's first recount of the term comes after the syncs that count its
// departures: the recount then shows no fall in its pod count that its
// departure totals do not carry (accountForFall counts what is still
// missing), which is the contract the cordon actor decides releases on
// (docs/watcher.md, Departures). It returns when all are queued or ctx ends.
func (w *Watcher) feed(ctx context.Context, podKeys, nodeKeys []string, seed map[string]record) {
	add := func(key string) bool {
		q := w.queue()
		if ctx.Err() != nil {
			return false
		}
		for q.Len() >= feedWindow {
			if ctx.Err() != nil || q.ShuttingDown() {
				return false
			}
			time.Sleep(feedPoll)
		}
		q.Add(key)
		return true
	}
	// onlyInKUBE feeds the seeded keys of one kind whose object the cache
	// does not hold (a cached one was fed with the cache's keys, or was
	// queued by its handler if it arrived since).
	onlyInKUBE := func(prefix string, cached cache.Indexer) bool {
		for k := range seed {
			name, ok := strings.CutPrefix(k, prefix)
			if !ok {
				continue
			}
			if _, exists, _ := cached.GetByKey(name); exists {
				continue
			}
			if !add(k) {
				return false
			}
		}
		return true
	}
	for _, k := range podKeys {
		if !add(podPrefix + k) {
			return
		}
	}
	if !onlyInKUBE(podPrefix, w.pods.GetIndexer()) {
		return
	}
	for _, k := range nodeKeys {
		if !add(nodePrefix + k) {
			return
		}
	}
	onlyInKUBE(nodePrefix, w.nodes.GetIndexer())
}

package watcher

import (
	"context"
	"time"
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

// feed queues a term's initial keys: every cached pod and node, then every
// key KUBE holds (one gone while no term ran gets its tombstone), keeping at
// most feedWindow of them waiting. It returns when all are queued or ctx ends.
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
	for _, k := range podKeys {
		if !add(podPrefix + k) {
			return
		}
	}
	for _, k := range nodeKeys {
		if !add(nodePrefix + k) {
			return
		}
	}
	for k := range seed {
		if !add(k) {
			return
		}
	}
}

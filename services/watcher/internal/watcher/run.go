package watcher

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/opswire/opswire/services/watcher/internal/compact"
	"github.com/opswire/opswire/shared/app"
)

// informerResync is the watcher's informer resync period: none. A resync
// re-delivers every cached object to the handlers, which drop it unread (its
// resourceVersion is unchanged), yet the informer first queues all of them
// (150,000 at scale) in its FIFO, under its lock, and updates its store and
// indexes for each: the watch events that arrive meanwhile wait behind them,
// the tail of the publish lag (docs/watcher.md, "Sustained churn"). What a
// resync would repair, a lost publish, the watcher retries itself (doubt,
// backoff). controller.InformersResyncPeriod is read for seed compatibility
// only.
const informerResync = 0

// Run is the opswire-watcher service: one shared informer factory for pods
// and nodes with compacting transforms, published to KUBE by the replica that
// holds the watcher Lease. Standbys keep warm caches, so failover costs a
// comparison, not a relist.
func Run(ctx context.Context, rt *app.Runtime) error {
	client, _, err := rt.Kube()
	if err != nil {
		return err
	}
	wc := rt.Config.Watcher
	factory := informers.NewSharedInformerFactoryWithOptions(client, informerResync)
	// The factory's pod informer would add a namespace index, which the
	// watcher never reads: at 150,000 pods that is megabytes of key sets.
	pods := factory.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewPodInformer(c, metav1.NamespaceAll, resync, cache.Indexers{})
	})
	nodes := factory.Core().V1().Nodes().Informer()
	if err := pods.SetTransform(compact.PodTransform(wc.MessageLimit)); err != nil {
		return err
	}
	if err := nodes.SetTransform(compact.NodeTransform(wc.NodeStatusMaxImages)); err != nil {
		return err
	}
	// Registered before anything else can fail or block, so /readyz never
	// answers ok before the caches are synced.
	rt.Server.AddReadiness("informers", func() error {
		if !pods.HasSynced() || !nodes.HasSynced() {
			return errors.New("caches not synced")
		}
		return nil
	})
	nc, _, err := rt.NATS(ctx)
	if err != nil {
		return err
	}
	// A JetStream context of our own: async publishes must time out so a
	// publish lost in a NATS outage is retried instead of waited on forever.
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncTimeout(wc.PublishTimeout.Duration),
		jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}

	w, err := New(pods, nodes, js, Options{
		Cluster: rt.Cluster, Workers: wc.Workers, TombstoneTTL: rt.Config.NATS.TombstoneTTL.Duration,
		StallWait: wc.PublishTimeout.Duration, MaxPayload: int(nc.MaxPayload()),
		KeepNodeLabel: nodeSelectorKeys(rt.Config.AutoCordon.Selector()),
	}, rt.Log, rt.Server.Registry)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced, nodes.HasSynced) {
		return nil // shutting down
	}
	rt.Log.Info().Int("pods", len(pods.GetStore().ListKeys())).Int("nodes", len(nodes.GetStore().ListKeys())).
		Dur("took", time.Since(start)).Msg("caches synced")

	elector := rt.Elector(client)
	// A leader that cannot read KUBE publishes nothing: not ready, so a
	// lasting cause (a permission, a missing stream) shows beside the logs.
	var seeded atomic.Bool
	rt.Server.AddReadiness("kube-seed", func() error {
		if elector.IsLeader() && !seeded.Load() {
			return errors.New("leader is loading the stored state from KUBE")
		}
		return nil
	})
	return elector.Run(ctx, func(ctx context.Context) error {
		seeded.Store(false)
		defer seeded.Store(false)
		seedStart := time.Now()
		seed, err := LoadSeed(ctx, js, rt.Cluster)
		for backoff := time.Second; err != nil; backoff = min(2*backoff, 10*time.Second) {
			if ctx.Err() != nil {
				return nil // leadership or the process ended
			}
			// KUBE is unreachable for now (a NATS node lost, a stream
			// electing its leader): this term publishes nothing until it
			// knows what KUBE holds, and tries again with a new consumer.
			rt.Log.Warn().Err(err).Dur("retryIn", backoff).Msg("cannot load the stored state from KUBE; retrying")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			seed, err = LoadSeed(ctx, js, rt.Cluster)
		}
		seeded.Store(true)
		rt.Log.Info().Int("objects", len(seed)).Dur("took", time.Since(seedStart)).Msg("loaded stored state from KUBE")
		return w.Run(ctx, seed)
	})
}

// nodeSelectorKeys selects the label keys the cordon actor's nodeSelector reads.
func nodeSelectorKeys(sel labels.Selector) func(string) bool {
	keys := map[string]bool{}
	if sel != nil {
		reqs, _ := sel.Requirements()
		for _, r := range reqs {
			keys[r.Key()] = true
		}
	}
	return func(k string) bool { return keys[k] }
}

package cordon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/metadata"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/subject"
)

// Run is the opswire-cordon service: leader-elected; the leader mirrors the
// nodes from KUBE and reconciles them; standbys wait, ready.
func Run(ctx context.Context, rt *app.Runtime) error {
	cfg := rt.Config.AutoCordon
	if !cfg.Enable {
		rt.Log.Warn().Msg("autoCordon.enable is false: idling")
		<-ctx.Done()
		return nil
	}
	client, restConfig, err := rt.Kube()
	if err != nil {
		return err
	}
	// The recounts that need only the number of a node's pods read their
	// metadata (recounter). metadata.ConfigFor copies the config; the typed
	// client's token bucket is handed over, so kube.qps and kube.burst bound
	// both clients at once.
	metaConfig := metadata.ConfigFor(restConfig)
	metaConfig.RateLimiter = client.CoreV1().RESTClient().GetRateLimiter()
	meta, err := metadata.NewForConfig(metaConfig)
	if err != nil {
		return fmt.Errorf("kubernetes metadata client: %w", err)
	}
	_, js, err := rt.NATS(ctx)
	if err != nil {
		return err
	}
	dryRun := rt.DryRun(cfg.DryRun)
	metrics := NewMetrics(rt.Server.Registry)
	wm := actuate.NewMetrics(rt.Server.Registry)
	// The audit publisher outlives leadership: what was done is stored
	// even after the lease is gone, for a grace period at shutdown.
	audit := actuate.NewAuditor(js, 0, wm, rt.Log)
	defer audit.Close(5 * time.Second)
	// Each cordon, uncordon and handover is journaled before its patch (an
	// intent on ops.<cluster>.cordon.intent.<node>): a leader SIGKILLed
	// before its outcome audit is stored leaves the intent for the next.
	journal := actuate.NewJournal(js, 0, wm, rt.Log)

	// Events go to the API asynchronously; in dry-run nothing is written.
	recorder, stopEvents := rt.EventRecorder(ctx, client, !dryRun)
	defer stopEvents()

	var mirror atomic.Pointer[kubestate.Mirror]
	elector := rt.ActorElector(client, dryRun)
	rt.Server.AddReadiness("kube-state", func() error {
		// Standbys are ready; the leader once it holds the node state.
		if m := mirror.Load(); elector.IsLeader() && (m == nil || !m.Synced()) {
			return errors.New("node state not loaded from KUBE yet")
		}
		return nil
	})
	policy := NewPolicy(cfg)
	rt.Log.Info().Bool("dryRun", dryRun).Str("mode", cfg.Mode).Int("maxPods", cfg.MaxPods).Int("minPods", cfg.MinPods).
		Float64("maxPodsPercent", cfg.MaxPodsPercent).Float64("minPodsPercent", cfg.MinPodsPercent).
		Str("nodeSelector", cfg.NodeSelector).Int("maxCordonedNodes", cfg.MaxCordonedNodes).
		Float64("maxCordonedPercent", cfg.MaxCordonedPercent).Int("maxActions", cfg.MaxActionsPerMinute).
		Dur("rateWindow", cfg.RateWindow.Duration).Dur("interval", cfg.Interval.Duration).Msg("cordon policy")
	for _, w := range cfg.Warnings() {
		rt.Log.Warn().Msg(w)
	}

	return elector.Run(ctx, func(ctx context.Context) error {
		ledger := NewLedger(dryRun)
		changes := NewChanges()
		m := kubestate.New(js, rt.Cluster, rt.Log, rt.Server.Registry, kubestate.Handlers{OnNode: changes.OnNode}, subject.KindNode)
		window := actuate.NewWindow(cfg.MaxActionsPerMinute, cfg.RateWindow.Duration)
		act := NewActuator(client, audit, recorder, ledger, NewFleets(m, ledger, policy, client, 0), ActuatorConfig{
			Cluster: rt.Cluster, Policy: policy, DryRun: dryRun, Identity: rt.Options.ID, Limiter: window,
			Intents: journal, Metadata: meta, ServerRequestTimeout: rt.Config.Kube.ServerRequestTimeout.Duration,
		}, metrics, rt.Log)
		ctrl := NewController(m, changes, policy, ledger, act, cfg.Interval.Duration, metrics, rt.Log)
		mirror.Store(m)

		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return m.Run(gctx) })
		g.Go(func() error {
			if err := m.WaitSynced(gctx); err != nil {
				return nil
			}
			// The previous leaders' actions count against this leader's
			// window, and their journaled patches whose audit never reached
			// OPS are audited now (when the live node shows the patch);
			// the marks in the API count too, and a mark OPS knows nothing
			// of (a cordon during a NATS outage by a leader that died with
			// its audit queued) has its audit rebuilt; nothing is written
			// before all of that is done.
			if !dryRun {
				if err := actuate.SeedAndRecover(gctx, js, window, act.Recovery(), wm, rt.Log, nil); err != nil {
					return nil
				}
			}
			return ctrl.Run(gctx)
		})
		return g.Wait()
	})
}

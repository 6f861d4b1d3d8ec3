package cordon

import (
	"context"
	"fmt"

	"k8s.io/client-go/metadata"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/pause"
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
	// Standbys follow the pause records too: a new leader knows at once.
	paused, err := pause.Follow(ctx, js, rt.Config.NATS.Replicas,
		pause.WatcherConfig{Cluster: rt.Cluster, Actor: Service, Registry: rt.Server.Registry}, rt.Log)
	if err != nil {
		return err
	}
	// The auditor outlives leadership and is flushed at shutdown; each
	// cordon, uncordon and handover is journaled before its patch (an
	// intent on ops.<cluster>.cordon.intent.<node>).
	terms := actuate.NewTerms(js, rt.Server.Registry, rt.Log, actuate.WithDuplicateWindow(rt.Config.NATS.Duplicates.Duration))
	defer terms.Close()

	// Events go to the API asynchronously; in dry-run nothing is written.
	recorder, stopEvents := rt.EventRecorder(ctx, client, !dryRun)
	defer stopEvents()

	elector := rt.ActorElector(client, dryRun)
	policy := NewPolicy(cfg)
	rt.Log.Info().Bool("dryRun", dryRun).Str("mode", cfg.Mode).Int("maxPods", cfg.MaxPods).Int("minPods", cfg.MinPods).
		Float64("maxPodsPercent", cfg.MaxPodsPercent).Float64("minPodsPercent", cfg.MinPodsPercent).
		Str("nodeSelector", cfg.NodeSelector).Int("maxCordonedNodes", cfg.MaxCordonedNodes).
		Float64("maxCordonedPercent", cfg.MaxCordonedPercent).Int("maxActions", cfg.MaxActionsPerMinute).
		Dur("rateWindow", cfg.RateWindow.Duration).Dur("interval", cfg.Interval.Duration).Msg("cordon policy")
	for _, w := range cfg.Warnings() {
		rt.Log.Warn().Msg(w)
	}

	termCfg := actuate.TermConfig{MaxActions: cfg.MaxActionsPerMinute, Per: cfg.RateWindow.Duration, DryRun: dryRun,
		Unready: "node state not loaded from KUBE yet"}
	return terms.Lead(ctx, elector, rt.Server, termCfg, func(window *actuate.Window) actuate.Term {
		ledger := NewLedger(dryRun)
		changes := NewChanges()
		m := kubestate.New(js, rt.Cluster, rt.Log, rt.Server.Registry, kubestate.Handlers{OnNode: changes.OnNode}, subject.KindNode)
		act := NewActuator(client, terms.Audit, recorder, ledger, NewFleets(m, ledger, policy, client, 0), ActuatorConfig{
			Cluster: rt.Cluster, Policy: policy, DryRun: dryRun, Identity: rt.Options.ID, Limiter: window,
			Intents: terms.Journal, Metadata: meta, Pause: paused, ServerRequestTimeout: rt.Config.Kube.ServerRequestTimeout.Duration,
		}, metrics, rt.Log)
		ctrl := NewController(m, changes, policy, ledger, act, cfg.Interval.Duration, metrics, rt.Log)
		// The marks in the API count too (Recovery.Live): a mark OPS knows
		// nothing of (a cordon during a NATS outage by a leader that died
		// with its audit queued) has its audit rebuilt.
		return actuate.Term{Mirror: m, Recovery: act.Recovery(), Run: ctrl.Run}
	})
}

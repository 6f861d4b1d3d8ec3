package cleanup

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/subject"
)

// workers handle pod keys in parallel; the workqueue never gives one key to two.
const workers = 4

// Run is the service: it waits for the Lease, then mirrors pods and nodes from
// KUBE and acts until leadership or ctx ends.
func Run(ctx context.Context, rt *app.Runtime) error {
	cfg := rt.Config.DelException
	log := rt.Log
	if !cfg.Enable {
		log.Warn().Msg("delException.enable is false: cleanup does nothing")
		<-ctx.Done()
		return nil
	}
	client, _, err := rt.Kube()
	if err != nil {
		return err
	}
	_, js, err := rt.NATS(ctx)
	if err != nil {
		return err
	}
	dryRun := rt.DryRun(cfg.DryRun)
	policy := NewPolicy(cfg)
	log.Info().Bool("dryRun", dryRun).Strs("reasons", cfg.Reasons).Dur("minAge", policy.MinAge).
		Dur("terminatingTimeout", policy.TerminatingTimeout).Int("maxDeletions", cfg.MaxDeletionsPerMinute).
		Dur("rateWindow", cfg.RateWindow.Duration).Bool("removeFinalizers", cfg.RemoveFinalizers).
		Bool("allowStatefulSetOnReadyNode", cfg.AllowStatefulSetOnReadyNode).Msg("cleanup policy")

	recorder, stopEvents := rt.EventRecorder(ctx, client, true)
	defer stopEvents()

	metrics := NewMetrics(rt.Server.Registry)
	act := NewActuator(client, js, recorder, metrics, log, ActuatorConfig{
		Cluster: rt.Cluster, Policy: policy, DryRun: dryRun,
		Limiter: NewWindow(cfg.MaxDeletionsPerMinute, cfg.RateWindow.Duration),
	})
	ctl := NewController(policy, act, cfg.Interval.Duration, workers, nil, log)
	rt.Server.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "opswire_cleanup_queue_depth", Help: "Pod keys waiting to be examined.",
	}, func() float64 { return float64(ctl.Len()) }))

	var mirror *kubestate.Mirror
	mirror = kubestate.New(js, rt.Cluster, log, rt.Server.Registry, kubestate.Handlers{
		OnPod:  ctl.OnPod,
		OnNode: func(old, cur *events.NodeState) { ctl.OnNode(old, cur, mirror) },
	}, subject.KindPod, subject.KindNode)

	elector := rt.Elector(client)
	rt.Server.AddReadiness("kube-state", func() error {
		if elector.IsLeader() && !mirror.Synced() {
			return errors.New("leader is loading cluster state from KUBE")
		}
		return nil
	})
	return elector.Run(ctx, func(lctx context.Context) error {
		done := make(chan struct{})
		go func() { defer close(done); _ = mirror.Run(lctx) }()
		defer func() { <-done }()
		if err := mirror.WaitSynced(lctx); err != nil {
			return nil // leadership or the process ended first
		}
		ctl.Run(lctx, mirror)
		return nil
	})
}

package cleanup

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opswire/opswire/shared/actuate"
	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/shared/kubestate"
	"github.com/opswire/opswire/shared/pause"
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
	_, restCfg, err := rt.Kube()
	if err != nil {
		return err
	}
	// Every response's Date header feeds the clock of the decisions: the
	// deadlines compare with the API server's timestamps, so they must not
	// fire early when this machine's clock runs ahead (clock.go).
	clock := NewServerClock()
	restCfg = rest.CopyConfig(restCfg)
	restCfg.Wrap(clock.Wrap)
	client, err := kubernetes.NewForConfig(restCfg)
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
		Bool("allowStatefulSetOnReadyNode", cfg.AllowStatefulSetOnReadyNode).Dur("statefulNotReadyTimeout", policy.StatefulNotReadyTimeout).
		Float64("brakeNotReadyShare", policy.BrakeNotReadyShare).Msg("cleanup policy")
	if cfg.RateWindow.Duration > time.Hour {
		log.Warn().Dur("rateWindow", cfg.RateWindow.Duration).
			Msg("delException.rateWindow is longer than the API server's default Event TTL (--event-ttl, 1h): removals journaled only as Kubernetes Events (during a NATS outage) expire before the window and a new leader under-counts them; raise --event-ttl above rateWindow or shorten it")
	}
	if unknown := UnknownReasons(cfg.Reasons); len(unknown) > 0 {
		log.Warn().Strs("reasons", unknown).
			Msg("delException.reasons: not a status.reason Kubernetes writes on Failed pods; these match no pod unless another component writes them (reasons match case-insensitively)")
	}

	recorder, stopEvents := rt.EventRecorder(ctx, client, true)
	defer stopEvents()

	metrics := NewMetrics(rt.Server.Registry)
	// Standbys follow the pause records too: a new leader knows at once.
	paused, err := pause.Follow(ctx, js, rt.Config.NATS.Replicas,
		pause.WatcherConfig{Cluster: rt.Cluster, Actor: Service, Registry: rt.Server.Registry}, log)
	if err != nil {
		return err
	}
	clock.Skew = metrics.ClockSkew.Set
	// The auditor outlives leadership and is flushed at shutdown; each
	// removal is journaled before it is written (an intent on
	// ops.<cluster>.cleanup.intent.<ns>.<pod>).
	terms := actuate.NewTerms(js, rt.Server.Registry, log, actuate.WithDuplicateWindow(rt.Config.NATS.Duplicates.Duration))
	defer terms.Close()
	// The controller of the current term (a replica that loses the lease
	// campaigns again and starts a new term with fresh state).
	var curCtl atomic.Pointer[Controller]
	rt.Server.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "opswire_cleanup_queue_depth", Help: "Pod keys waiting to be examined.",
	}, func() float64 {
		if c := curCtl.Load(); c != nil {
			return float64(c.Len())
		}
		return 0
	}))

	elector := rt.ActorElector(client, dryRun)
	termCfg := actuate.TermConfig{MaxActions: cfg.MaxDeletionsPerMinute, Per: cfg.RateWindow.Duration, DryRun: dryRun,
		Unready: "leader is loading cluster state from KUBE"}
	return terms.Lead(ctx, elector, rt.Server, termCfg, func(window *actuate.Window) actuate.Term {
		act := NewActuator(client, terms.Audit, recorder, metrics, log, ActuatorConfig{
			Cluster: rt.Cluster, Policy: policy, DryRun: dryRun, Limiter: window, Now: clock.Now, Intents: terms.Journal,
			Replica: rt.Options.ID, Pause: paused, ServerRequestTimeout: rt.Config.Kube.ServerRequestTimeout.Duration,
		})
		ctl := NewController(policy, act, metrics, cfg.Interval.Duration, workers, clock.Now, log)
		var mirror *kubestate.Mirror
		mirror = kubestate.New(js, rt.Cluster, log, rt.Server.Registry, kubestate.Handlers{
			OnPod:  ctl.OnPod,
			OnNode: func(old, cur *events.NodeState) { ctl.OnNode(old, cur, mirror) },
		}, subject.KindPod, subject.KindNode)
		curCtl.Store(ctl)
		// Besides OPS, the recovery reads cleanup's own Events
		// (LiveActions): a leader SIGKILLed during a NATS outage left its
		// removals only there.
		return actuate.Term{Mirror: mirror, Recovery: act.Recovery(), Run: func(ctx context.Context) error {
			ctl.Run(ctx, mirror)
			return nil
		}}
	})
}

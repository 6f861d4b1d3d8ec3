package actor

import (
	"context"
	"os"

	"k8s.io/client-go/kubernetes"

	"github.com/opswire/opswire/shared/app"
	"github.com/opswire/opswire/shared/pause"
)

// Run is the service's entry point for app.Main.
func Run(ctx context.Context, rt *app.Runtime) error {
	if rt.Options.DryRun {
		rt.Log.Info().Msg("--dry-run has no effect: the report actor never writes to the cluster, it only publishes to OPS")
	}
	nc, js, err := rt.NATS(ctx)
	if err != nil {
		return err
	}
	// Standbys follow the pause records too: a new leader knows at once.
	paused, err := pause.Follow(ctx, js, rt.Config.NATS.Replicas,
		pause.WatcherConfig{Cluster: rt.Cluster, Actor: Service, Registry: rt.Server.Registry}, rt.Log)
	if err != nil {
		return err
	}
	a, err := New(Deps{
		Config: rt.Config, Cluster: rt.Cluster, JS: js, NC: nc, MaxPayload: nc.MaxPayload(),
		Log: rt.Log, Registry: rt.Server.Registry, Getenv: os.Getenv, Pause: paused,
	})
	if err != nil {
		return err
	}
	rt.Server.AddReadiness("state", a.Ready)
	// The Kubernetes client is only needed for the Lease.
	var client kubernetes.Interface
	if rt.Config.Controller.LeaderElect {
		if client, _, err = rt.Kube(); err != nil {
			return err
		}
	}
	return rt.Elector(client).Run(ctx, a.Lead)
}

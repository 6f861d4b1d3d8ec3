package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/shared/kube"
	"github.com/opswire/opswire/shared/leader"
	"github.com/opswire/opswire/shared/logging"
	"github.com/opswire/opswire/shared/natsx"
	"github.com/opswire/opswire/shared/server"
	"github.com/opswire/opswire/shared/subject"
)

// Exit codes of every binary.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Runtime is what a service's run function gets: parsed options, the loaded
// configuration, a logger, the health/metrics server, and constructors for
// the clients it needs.
type Runtime struct {
	Spec    Spec
	Options Options
	Config  *config.Config
	Log     zerolog.Logger
	Server  *server.Server
	// Cluster is the resolved <cluster> subject token.
	Cluster string

	nc *nats.Conn
}

// Main runs a service and exits with the contract's code. Only main packages call it.
func Main(spec Spec, run func(ctx context.Context, rt *Runtime) error) {
	os.Exit(Run(spec, os.Args[1:], os.Getenv, os.Stdout, os.Stderr, run))
}

// Run is Main without the exit, for tests.
func Run(spec Spec, args []string, getenv func(string) string, stdout, stderr io.Writer, run func(ctx context.Context, rt *Runtime) error) int {
	opts, err := parse(spec, args, getenv, stderr)
	switch {
	case errors.Is(err, errHelp):
		return ExitOK
	case errors.Is(err, errVersion):
		fmt.Fprintf(stdout, "%s %s\n", spec.Binary(), Version)
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", spec.Binary(), err)
		return ExitUsage
	}
	if opts.CheckConfig {
		return checkConfig(spec, opts, stdout, stderr)
	}
	log, err := logging.New(stderr, opts.LogLevel, opts.LogFormat, spec.Service)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", spec.Binary(), err)
		return ExitUsage
	}
	cfg, err := config.Load(opts.Config)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", spec.Binary(), opts.Config, err)
		return ExitUsage
	}
	cluster := cfg.Cluster.Name
	if opts.Cluster != "" {
		cluster = opts.Cluster
		cfg.Cluster.Name = cluster
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "%s: --cluster: %v\n", spec.Binary(), err)
			return ExitUsage
		}
	}
	log = log.With().Str("cluster", cluster).Logger()
	applyMemoryLimit(getenv, log)
	rt := &Runtime{Spec: spec, Options: opts, Config: cfg, Log: log, Server: server.New(), Cluster: cluster}
	registerBuildInfo(rt.Server.Registry, spec.Service)
	rt.Server.Registry.MustRegister(natsx.Suppressed)
	for _, result := range []string{"foreign", "unverified"} {
		natsx.Suppressed.WithLabelValues(result) // exported at 0, so increase() sees the first one
	}
	natsx.SetPublishLog(log)
	rt.Server.Pprof = opts.Pprof
	// Not ready until the service has connected to NATS (rt.NATS replaces
	// this check with the live one), so /readyz never answers ok at start-up.
	rt.Server.AddReadiness("nats", func() error { return errors.New("not connected yet") })
	if err := rt.Server.Start(opts.Listen); err != nil {
		log.Error().Err(err).Msg("cannot serve health and metrics")
		return ExitFailure
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info().Str("version", Version).Str("config", opts.Config).Str("listen", rt.Server.Addr()).
		Str("id", opts.ID).Bool("dryRun", opts.DryRun).Msg("starting")
	runErr := run(ctx, rt)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rt.Server.Shutdown(shutdownCtx)
	natsx.Drain(rt.nc, 5*time.Second)
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		log.Error().Err(runErr).Msg("stopped with an error")
		return ExitFailure
	}
	log.Info().Msg("stopped")
	return ExitOK
}

// Kube builds the Kubernetes client of DESIGN §9.
func (rt *Runtime) Kube() (kubernetes.Interface, *rest.Config, error) {
	rt.Log.Info().Str("credentials", kube.Source(rt.Options.Kubeconfig)).Msg("kubernetes client")
	return kube.NewClient(kube.Options{
		Kubeconfig: rt.Options.Kubeconfig,
		QPS:        rt.Config.Kube.QPS,
		Burst:      rt.Config.Kube.Burst,
		UserAgent:  rt.Spec.Binary() + "/" + Version,
	})
}

// NATS connects (waiting for the server if needed), registers the "nats"
// and "streams" readiness checks, and creates or updates the KUBE and OPS
// streams (with --manage-streams=false: waits until they exist).
func (rt *Runtime) NATS(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	nc, js, streamsReady, err := rt.connectNATS(ctx)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case rt.Options.ManageStreams:
		err = natsx.EnsureStreams(ctx, js, rt.Config.NATS)
	case len(rt.Config.NATS.OpsSources) > 0: // a fleet hub: OPS, no KUBE
		err = natsx.WaitForStreams(ctx, js, rt.Log, 10*time.Second, natsx.StreamNames(rt.Config.NATS)...)
	default:
		err = natsx.WaitStreams(ctx, js, rt.Log, 10*time.Second)
	}
	if err != nil {
		return nil, nil, err
	}
	streamsReady.Store(true)
	watchOpsStream(ctx, js, subject.OpsStream, rt.Server.Registry, rt.Log, opsStreamPoll)
	return nc, js, nil
}

// NATSReading is NATS for a service that reads streams other than its
// cluster's KUBE and OPS (a fleet notifier on a hub reads the fleet-wide
// stream): it creates or changes no stream, except a fleet hub's OPS
// defined by nats.opsSources with --manage-streams, and waits until every
// one of streams exists. The first is the one
// the opswire_ops_stream_* gauges report.
func (rt *Runtime) NATSReading(ctx context.Context, streams ...string) (*nats.Conn, jetstream.JetStream, error) {
	nc, js, streamsReady, err := rt.connectNATS(ctx)
	if err != nil {
		return nil, nil, err
	}
	// On a fleet hub the deployment defines the fleet-wide OPS in config.yml
	// (nats.opsSources): a service started there with --manage-streams (the
	// fleet-hub overlay's notifier) creates or updates it first.
	if rt.Options.ManageStreams && len(rt.Config.NATS.OpsSources) > 0 {
		if err := natsx.EnsureStreams(ctx, js, rt.Config.NATS); err != nil {
			return nil, nil, err
		}
	}
	if err := natsx.WaitForStreams(ctx, js, rt.Log, 10*time.Second, streams...); err != nil {
		return nil, nil, err
	}
	streamsReady.Store(true)
	if len(streams) > 0 {
		watchOpsStream(ctx, js, streams[0], rt.Server.Registry, rt.Log, opsStreamPoll)
	}
	return nc, js, nil
}

// natsOptions are the connection settings from the options and the Spec.
func (rt *Runtime) natsOptions() natsx.Options {
	o := rt.Options
	no := natsx.Options{
		URL: o.NATSURL, Name: rt.Spec.Binary() + "/" + o.ID, Creds: o.NATSCreds, User: o.NATSUser,
		Password: o.NATSPassword, TLSCert: o.NATSTLSCert, TLSKey: o.NATSTLSKey, TLSCA: o.NATSTLSCA,
		InboxPrefix: o.NATSInboxPrefix,
	}
	if no.InboxPrefix == "" {
		no.InboxPrefix = natsx.InboxPrefix(o.NATSUser)
	}
	if rt.Spec.Actor || rt.Spec.NoPublishBuffer {
		// No buffering while disconnected: an actor's audit publisher and
		// the watcher retry every message themselves, and a copy buffered
		// during an outage would be sent unseen at reconnect: stored a second
		// time if the next attempt came after the stream's duplicate window
		// (actors), or after the tombstone or newer state the next watcher
		// leader stored meanwhile (a ghost pod, docs/watcher.md).
		no.ReconnectBufSize = -1
	}
	return no
}

// connectNATS connects and registers the "nats" and "streams" readiness
// checks; the caller sets the flag it returns once its streams are there.
func (rt *Runtime) connectNATS(ctx context.Context) (*nats.Conn, jetstream.JetStream, *atomic.Bool, error) {
	nc, err := natsx.Connect(rt.natsOptions(), rt.Log)
	if err != nil {
		return nil, nil, nil, err
	}
	rt.nc = nc
	rt.Server.AddReadiness("nats", func() error {
		if !nc.IsConnected() {
			return errors.New("not connected")
		}
		return nil
	})
	if err := natsx.WaitConnected(ctx, nc); err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	streamsReady := &atomic.Bool{}
	rt.Server.AddReadiness("streams", func() error {
		if !streamsReady.Load() {
			return errors.New("streams not verified yet")
		}
		return nil
	})
	return nc, js, streamsReady, nil
}

// DryRunLeaseSuffix ends the Lease name of an actor in dry-run.
const DryRunLeaseSuffix = "-dryrun"

// Elector builds the leader election of a service: Lease
// <controller.leaseLockName>-<service> in controller.leaseLockNamespace,
// exported as the opswire_leader gauge and the opswire_leader_terms_total and
// opswire_leader_lost_total counters.
func (rt *Runtime) Elector(client kubernetes.Interface) *leader.Elector {
	return rt.elector(client, rt.LeaseName(false))
}

// ActorElector is the election of an actor that writes to the cluster. In
// dry-run it competes for its own Lease, <lease>-dryrun: a dry-run replica
// (started by --dry-run or the section's dryRun) can never take the
// production Lease and silently stop the real actor, and dry-run replicas
// still elect one of themselves, so they publish one stream of decisions.
func (rt *Runtime) ActorElector(client kubernetes.Interface, dryRun bool) *leader.Elector {
	return rt.elector(client, rt.LeaseName(dryRun))
}

// LeaseName is the name of the service's Lease, with DryRunLeaseSuffix in dry-run.
func (rt *Runtime) LeaseName(dryRun bool) string { return leaseName(rt.Config, rt.Spec, dryRun) }

func leaseName(cfg *config.Config, spec Spec, dryRun bool) string {
	name := cfg.Controller.LeaseLockName + "-" + spec.Service
	if dryRun {
		name += DryRunLeaseSuffix
	}
	return name
}

func (rt *Runtime) elector(client kubernetes.Interface, lease string) *leader.Elector {
	c := rt.Config.Controller
	e := leader.New(client, leader.Config{
		Enabled:       c.LeaderElect,
		Name:          lease,
		Namespace:     c.LeaseLockNamespace,
		Identity:      rt.Options.ID,
		LeaseDuration: c.LeaseDuration.Duration,
		RenewDeadline: c.RenewDeadline.Duration,
		RetryPeriod:   c.RetryPeriod.Duration,
	}, rt.Log)
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opswire_leader", Help: "1 while this replica holds the actor's lease.",
	})
	rt.Server.Registry.MustRegister(g,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "opswire_leader_terms_total", Help: "Terms this replica has led (its work started under the lease).",
		}, func() float64 { return float64(e.Terms()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "opswire_leader_lost_total",
			Help: "Terms that ended because the lease was lost or not renewed within renewDeadline (the replica then campaigns again).",
		}, func() float64 { return float64(e.Lost()) }))
	e.OnChange = func(leading bool) {
		if leading {
			g.Set(1)
		} else {
			g.Set(0)
		}
	}
	where := c.LeaseLockNamespace + "/" + lease
	rt.Server.AddReadiness("lease "+lease, func() error {
		if err := e.Refused(); err != nil {
			return leaseRefusal(where, err)
		}
		return nil
	})
	e.OnRefused = func(err error) { rt.podEvent(client, "OpswireLeaseRefused", leaseRefusal(where, err).Error()) }
	return e
}

// leaseRefusal says why a replica cannot lead and what to change.
func leaseRefusal(lease string, err error) error {
	return fmt.Errorf("cannot lead: the API refuses the Lease %s (%v); set controller.leaseLockNamespace to a namespace "+
		"where this ServiceAccount may create Leases (deploy/ and the Helm chart grant the namespace opswire runs in)", lease, err)
}

// DryRun is true when --dry-run or the section's dryRun is set.
func (rt *Runtime) DryRun(section bool) bool { return rt.Options.DryRun || section }

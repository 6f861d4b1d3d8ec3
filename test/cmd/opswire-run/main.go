// Command opswire-run is `make run`: the five services in the foreground
// against your current kubeconfig, with a local NATS (see package runlocal).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opswire/opswire/test/runlocal"
)

func main() {
	fs := flag.NewFlagSet("opswire-run", flag.ContinueOnError)
	var o runlocal.Options
	fs.StringVar(&o.BinDir, "bin", "bin", "directory of the opswire-<service> binaries (make build)")
	fs.StringVar(&o.Config, "config", "deploy/local/config.yml", "configuration file")
	fs.StringVar(&o.DataDir, "data", ".cache/run/nats", "JetStream storage of the local NATS")
	fs.IntVar(&o.NATSPort, "nats-port", 4222, "local NATS client port")
	fs.IntVar(&o.FirstPort, "first-port", 8081, "the services listen on this port and the next four")
	fs.BoolVar(&o.DryRun, "dry-run", true, "actors decide and publish, never write to the cluster")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	o.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runlocal.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "opswire-run:", err)
		stop()
		os.Exit(1)
	}
}

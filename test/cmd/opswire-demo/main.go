// Command opswire-demo is `make demo`: opswire end to end on one machine,
// without a cluster (see package demo). Ctrl-C stops everything and exits 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/opswire/opswire/test/demo"
)

func main() {
	fs := flag.NewFlagSet("opswire-demo", flag.ContinueOnError)
	pace := fs.Duration("pace", 3*time.Second, "pause between situations, so you can read along")
	exit := fs.Bool("exit-when-done", false, "stop and exit 0 once every situation was shown, instead of waiting for Ctrl-C")
	timeout := fs.Duration("timeout", 3*time.Minute, "fail if the scenario takes longer than this")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := demo.Run(ctx, demo.Options{ExitWhenDone: *exit, Timeout: *timeout, Pace: *pace, Out: os.Stdout, Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "opswire-demo:", err)
		stop()
		os.Exit(1)
	}
}

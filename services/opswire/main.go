// Command opswire is the command for people who operate opswire: pause and
// resume the actors, and see their state (docs/operate.md). Built as
// kubectl-opswire it is also a kubectl plugin (kubectl opswire ...).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/opswire/opswire/services/opswire/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}

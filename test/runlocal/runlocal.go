// Package runlocal is `make run`: the five opswire services in the
// foreground against the user's current kubeconfig, with a local NATS
// server (embedded nats-server with JetStream, data kept in .cache/run so the
// audit log survives restarts). Each service's log lines are prefixed with
// its name. Ctrl-C stops the services (SIGTERM, so leaders release their
// Leases), then NATS.
package runlocal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Services in start order.
var Services = []string{"watcher", "cordon", "cleanup", "report", "notifier"}

// Options of a local run.
type Options struct {
	BinDir    string // where opswire-<service> binaries are (make build: ./bin)
	Config    string // the configuration file
	DataDir   string // JetStream storage
	NATSPort  int    // local NATS client port
	FirstPort int    // services listen on FirstPort, FirstPort+1, ...
	DryRun    bool   // actors decide and publish, never write
	Out       io.Writer
}

// Run starts NATS and the services and blocks until ctx ends or a service
// exits on its own (then everything is stopped and an error returned).
func Run(ctx context.Context, o Options) error {
	ns, err := startNATS(o)
	if err != nil {
		return err
	}
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	url := ns.ClientURL()
	fmt.Fprintf(o.Out, "opswire: NATS with JetStream at %s (data in %s); try: nats sub 'ops.>' -s %s\n", url, o.DataDir, url)
	if o.DryRun {
		fmt.Fprintln(o.Out, "opswire: actors run with --dry-run: they decide and publish to OPS but never write to the cluster (make run DRY_RUN=0 to act)")
	}

	var out sync.Mutex
	exited := make(chan string, len(Services))
	var procs []*service
	for i, svc := range Services {
		args := []string{"--config", o.Config, "--nats-url", url, "--listen", "127.0.0.1:" + strconv.Itoa(o.FirstPort+i),
			"--log-format", "console", "--id", "local-" + svc}
		if o.DryRun && svc != "watcher" && svc != "notifier" {
			args = append(args, "--dry-run")
		}
		cmd := exec.Command(filepath.Join(o.BinDir, "opswire-"+svc), args...)
		// Own process group: Ctrl-C reaches only this program, which stops
		// the services in order; Pdeathsig kills them if it dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := cmd.Start(); err != nil {
			stopAll(procs)
			return fmt.Errorf("start opswire-%s (run `make build` first): %w", svc, err)
		}
		fmt.Fprintf(o.Out, "opswire: started opswire-%s (pid %d, health and metrics on http://127.0.0.1:%d)\n", svc, cmd.Process.Pid, o.FirstPort+i)
		go prefix(pr, o.Out, &out, fmt.Sprintf("%-8s | ", svc))
		sp := &service{cmd: cmd, done: make(chan struct{})}
		go func(svc string, pw *io.PipeWriter) {
			err := cmd.Wait()
			close(sp.done)
			pw.CloseWithError(io.EOF)
			if ctx.Err() == nil {
				exited <- fmt.Sprintf("opswire-%s exited: %v", svc, err)
			}
		}(svc, pw)
		procs = append(procs, sp)
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(o.Out, "opswire: stopping the services…")
		stopAll(procs)
		return nil
	case msg := <-exited:
		stopAll(procs)
		return errors.New(msg)
	}
}

func startNATS(o Options) (*server.Server, error) {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return nil, err
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: o.NATSPort, JetStream: true, StoreDir: o.DataDir, NoSigs: true})
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server not ready on port %d (in use?)", o.NATSPort)
	}
	return ns, nil
}

// service is one running binary; done closes when it has exited.
type service struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// stopAll sends SIGTERM to every service (leaders release their Leases) and
// waits up to 15 s in all before SIGKILL.
func stopAll(procs []*service) {
	for i := len(procs) - 1; i >= 0; i-- {
		_ = procs[i].cmd.Process.Signal(syscall.SIGTERM)
	}
	grace, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.done:
		case <-grace.Done():
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// prefix copies lines from r to w, each prefixed.
func prefix(r io.Reader, w io.Writer, mu *sync.Mutex, p string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mu.Lock()
		fmt.Fprintln(w, p+sc.Text())
		mu.Unlock()
	}
}

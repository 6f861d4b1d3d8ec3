package harness

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// proc is a child process whose output goes to a log file.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // from Wait, valid after done
	log  string
}

// startLogged starts a long-running binary with its output in logPath. The
// child dies with the test process (Pdeathsig), so nothing is left behind.
func startLogged(t testing.TB, logPath, bin string, args ...string) *proc {
	t.Helper()
	return startLoggedEnv(t, logPath, nil, bin, args...)
}

func startLoggedEnv(t testing.TB, logPath string, env []string, bin string, args ...string) *proc {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig and waits up to timeout for the exit; it returns the exit
// code, or -1 if the process did not exit in time.
func (p *proc) signal(sig syscall.Signal, timeout time.Duration) int {
	if p == nil {
		return 0
	}
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// terminate sends SIGTERM, then SIGKILL after grace.
func (p *proc) terminate(grace time.Duration) {
	if p == nil {
		return
	}
	if p.signal(syscall.SIGTERM, grace) == -1 {
		p.signal(syscall.SIGKILL, 10*time.Second)
	}
}

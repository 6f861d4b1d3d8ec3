package harness

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// Signal sends sig to the process without waiting (SIGSTOP freezes it as a
// long GC pause or a stalled node would, SIGCONT resumes it).
func (p *Process) Signal(sig syscall.Signal) error {
	if p.p.exited() {
		return nil
	}
	return p.p.cmd.Process.Signal(sig)
}

// Freeze sends SIGSTOP and returns once every thread of the process is
// stopped. kill(2) returns as soon as the signal is queued: the kernel wakes
// one thread to take it, and until that thread has run the group stop the
// process's other threads keep running (on a loaded machine, for
// milliseconds), so they can still read and act on what reaches their
// sockets.
func (p *Process) Freeze(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	for !allThreadsStopped(p.p.cmd.Process.Pid) {
		if p.p.exited() {
			t.Fatalf("process exited while being frozen")
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("process %d not stopped 10 s after SIGSTOP", p.p.cmd.Process.Pid)
		}
		time.Sleep(100 * time.Microsecond)
	}
	return time.Since(start)
}

// allThreadsStopped reports whether every thread of pid is in state T
// (stopped by a signal), from /proc/<pid>/task/<tid>/stat.
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// "<tid> (<comm>) <state> ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			return false
		}
	}
	return true
}

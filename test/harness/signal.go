package harness

import "syscall"

// Signal sends sig to the process without waiting (SIGSTOP freezes it as a
// long GC pause or a stalled node would, SIGCONT resumes it).
func (p *Process) Signal(sig syscall.Signal) error {
	if p.p.exited() {
		return nil
	}
	return p.p.cmd.Process.Signal(sig)
}

// Package testport picks the ports a test hands to a server it starts
// (nats-server, etcd, kube-apiserver, an embedded server started again on
// the same port) instead of binding 127.0.0.1:0 and releasing it.
//
// The kernel hands out :0 from the ephemeral range, the same range it takes
// the local port of every outgoing connection from. A port picked there and
// released before the server binds it can be taken in between by any client
// socket of any test (CI saw nats-server exit with "bind: address already in
// use" on such a port). So a pick comes from below the ephemeral range, and
// a lock file held until the process exits keeps this process and the other
// test binaries `go test` runs at the same time from picking it again.
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// reservedPorts are the lock files of the ports this process picked; they
// stay open (and locked) until it exits.
var reservedPorts struct {
	sync.Mutex
	files []*os.File
}

// Free returns a loopback TCP port that is free now, lies outside the
// kernel's ephemeral range and that no other harness user on this machine
// gets until this process exits.
func Free() (int, error) {
	lo, hi := pickRange()
	return freeIn(filepath.Join(os.TempDir(), "opswire-harness-ports"), lo, hi)
}

// freeIn is Free picking from lo-hi with the lock files in dir.
func freeIn(dir string, lo, hi int) (int, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	reservedPorts.Lock()
	defer reservedPorts.Unlock()
	n := hi - lo + 1
	first := rand.IntN(n)
	for i := range n {
		port := lo + (first+i)%n
		f, ok, err := lockPort(dir, port)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil { // something outside the harness listens there
			f.Close()
			continue
		}
		l.Close()
		reservedPorts.files = append(reservedPorts.files, f)
		return port, nil
	}
	return 0, fmt.Errorf("free port: every port in %d-%d is taken", lo, hi)
}

// lockPort takes the lock file of port without waiting; ok is false when
// another holder has it.
func lockPort(dir string, port int) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false, fmt.Errorf("free port: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("free port: lock %d: %w", port, err)
	}
	return f, true, nil
}

// pickRange is the span of ports below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768 by default) that the
// harness picks from.
func pickRange() (lo, hi int) {
	ephemeralLo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				ephemeralLo = v
			}
		}
	}
	hi = ephemeralLo - 1
	lo = max(hi-12000, 10000)
	if lo >= hi { // an unusual ephemeral range: fall back to the ports above it
		return 10000, 65535
	}
	return lo, hi
}

// Must is Free for a test: it fails the test when no port is left.
func Must(t interface {
	Helper()
	Fatalf(format string, args ...any)
}) int {
	t.Helper()
	p, err := Free()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

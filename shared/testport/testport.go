// Package testport picks the ports a test hands to a server it starts
// (nats-server, etcd, kube-apiserver, an embedded server started again on
// the same port) instead of binding 127.0.0.1:0 and releasing it.
//
// The kernel hands out :0 from the ephemeral range, the same range it takes
// the local port of every outgoing connection from. A port picked there and
// released before the server binds it can be taken in between by any client
// socket of any test (CI saw nats-server exit with "bind: address already in
// use" on such a port). So a pick comes from below the ephemeral range, and
// a reservation held until the process exits keeps this process and the
// other test binaries `go test` runs at the same time from picking it again.
// A reservation is a Linux abstract unix socket named after the port: its
// name is unique per network namespace, the kernel frees it when the
// process exits however it ends, and it leaves no file behind.
package testport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// reservedPorts are the reservations of the ports this process picked;
// they stay open until it exits.
var reservedPorts struct {
	sync.Mutex
	held []net.Listener
}

// reservationPrefix names the reservations ("@" makes the socket abstract).
const reservationPrefix = "@opswire-test-port-"

// Free returns a loopback TCP port that is free now, lies outside the
// kernel's ephemeral range and that no other harness user on this machine
// gets until this process exits.
func Free() (int, error) {
	lo, hi := pickRange()
	return freeIn(reservationPrefix, lo, hi)
}

// freeIn is Free picking from lo-hi with the reservations named prefix<port>.
func freeIn(prefix string, lo, hi int) (int, error) {
	reservedPorts.Lock()
	defer reservedPorts.Unlock()
	n := hi - lo + 1
	first := rand.IntN(n)
	for i := range n {
		port := lo + (first+i)%n
		r, ok, err := reserve(prefix, port)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil { // something outside the harness listens there
			r.Close()
			continue
		}
		l.Close()
		reservedPorts.held = append(reservedPorts.held, r)
		return port, nil
	}
	return 0, fmt.Errorf("free port: every port in %d-%d is taken", lo, hi)
}

// reserve takes the reservation of port; ok is false when another holder
// has it.
func reserve(prefix string, port int) (r net.Listener, ok bool, err error) {
	r, err = net.Listen("unix", prefix+strconv.Itoa(port))
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("free port: reserve %d: %w", port, err)
	}
	return r, true, nil
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

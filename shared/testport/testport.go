// Package testport picks the ports a test hands to a server it starts
// (nats-server, etcd, kube-apiserver, an embedded server started again on
// the same port) instead of binding 127.0.0.1:0 and releasing it.
//
// The kernel hands out :0 from the ephemeral range, the same range it takes
// the local port of every outgoing connection from. A port picked there and
// released before the server binds it can be taken in between by any client
// socket of any test (CI saw nats-server exit with "bind: address already in
// use" on such a port). So a pick comes from outside the ephemeral range, and
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
// kernel's ephemeral range and that no other user of this package in the
// same network namespace gets until this process exits.
func Free() (int, error) { return FreeRun(1) }

// FreeRun is Free for n consecutive ports: it returns the first, and all n
// are reserved.
func FreeRun(n int) (int, error) {
	span, err := machineRange()
	if err != nil {
		return 0, err
	}
	return freeIn(reservationPrefix, span[0], span[1], n)
}

// machineRange is pickRange of this machine's ephemeral range, read once.
var machineRange = sync.OnceValues(func() ([2]int, error) {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	lo, hi, err := pickRange(string(b))
	return [2]int{lo, hi}, err
})

// freeIn is FreeRun picking from lo-hi with the reservations named prefix<port>.
func freeIn(prefix string, lo, hi, n int) (int, error) {
	reservedPorts.Lock()
	defer reservedPorts.Unlock()
	starts := hi - lo - n + 2 // first ports of a run that fits
	if n < 1 || starts < 1 {
		return 0, fmt.Errorf("free port: no run of %d in %d-%d", n, lo, hi)
	}
	first := rand.IntN(starts)
	for i := range starts {
		port := lo + (first+i)%starts
		run, ok, err := take(prefix, port, n)
		if err != nil {
			return 0, err
		}
		if ok {
			reservedPorts.held = append(reservedPorts.held, run...)
			return port, nil
		}
	}
	return 0, fmt.Errorf("free port: every run of %d in %d-%d is taken", n, lo, hi)
}

// take reserves port..port+n-1 and checks that nothing listens on them; ok
// is false (and nothing is kept) when one is reserved or in use.
func take(prefix string, port, n int) ([]net.Listener, bool, error) {
	var run []net.Listener
	for p := port; p < port+n; p++ {
		r, ok, err := reserve(prefix, p)
		if err == nil && ok {
			run = append(run, r)
			ok, err = listenable(p)
		}
		if err != nil || !ok {
			for _, r := range run {
				r.Close()
			}
			return nil, false, err
		}
	}
	return run, true, nil
}

// listenable reports whether a listener can bind 127.0.0.1:port now: false
// when something listens there; any other failure is an error.
func listenable(port int) (bool, error) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("free port: %w", err)
	}
	return true, l.Close()
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

// pickRange is the span of unprivileged ports outside the ephemeral range
// (ephemeral: the contents of /proc/sys/net/ipv4/ip_local_port_range,
// "32768 60999" when unreadable) that the ports are picked from: up to
// 12,000 ports below it, or above it when that span is larger.
func pickRange(ephemeral string) (lo, hi int, err error) {
	elo, ehi := 32768, 60999
	if f := strings.Fields(ephemeral); len(f) == 2 {
		a, aerr := strconv.Atoi(f[0])
		b, berr := strconv.Atoi(f[1])
		if aerr == nil && berr == nil && a <= b {
			elo, ehi = a, b
		}
	}
	belowLo, belowHi := max(elo-12000, 1024), elo-1
	aboveLo, aboveHi := ehi+1, min(ehi+12000, 65535)
	switch {
	case belowHi-belowLo >= aboveHi-aboveLo && belowHi >= belowLo:
		return belowLo, belowHi, nil
	case aboveHi >= aboveLo:
		return aboveLo, aboveHi, nil
	}
	return 0, 0, fmt.Errorf("free port: the ephemeral range %d-%d leaves no unprivileged port outside it", elo, ehi)
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

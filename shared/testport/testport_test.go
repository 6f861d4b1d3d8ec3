package testport

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// TestFreeSkipsReservedPorts: a port another holder reserved, or
// that something already listens on, is never handed out, nor is a port
// twice; when none is left the error says so.
func TestFreeSkipsReservedPorts(t *testing.T) {
	lo, _ := pickRange()
	prefix := reservationPrefix + t.Name() + "-" + strconv.Itoa(os.Getpid()) + "-"
	held, ok, err := reserve(prefix, lo) // another test binary's reservation
	if err != nil || !ok {
		t.Fatalf("reserve %d: ok=%v err=%v", lo, ok, err)
	}
	defer held.Close()
	var listening int // a port some other program listens on
	for p := lo + 1; p < lo+100 && listening == 0; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			defer l.Close()
			listening = p
		}
	}
	if listening == 0 {
		t.Fatal("no port to listen on")
	}
	free := map[int]bool{}
	for p := listening + 1; len(free) < 3; p++ {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			l.Close()
			free[p] = true
		}
	}
	// The range: the locked port, the ports up to the listened one, and three free ones after it.
	var hi int
	for p := range free {
		hi = max(hi, p)
	}
	got := map[int]bool{}
	for {
		p, err := freeIn(prefix, lo, hi)
		if err != nil {
			break
		}
		if got[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		got[p] = true
		if p == lo || p == listening {
			t.Fatalf("port %d handed out: it is reserved or listened on", p)
		}
	}
	for p := range free {
		if !got[p] {
			t.Errorf("free port %d never handed out (got %v)", p, got)
		}
	}
	if _, err := freeIn(prefix, lo, hi); err == nil {
		t.Fatal("no error once every port is taken")
	}
}

// TestFreeBelowEphemeralRange: the ports the harness uses do not come
// from the range the kernel takes outgoing connections' ports from.
func TestFreeBelowEphemeralRange(t *testing.T) {
	lo, hi := pickRange()
	for range 50 {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p > hi {
			t.Fatalf("port %d outside %d-%d", p, lo, hi)
		}
	}
	if hi >= 32768 {
		t.Fatalf("pick range %d-%d reaches the default ephemeral range", lo, hi)
	}
}

package testport

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func ephemeralRange(t *testing.T) (lo, hi int) {
	t.Helper()
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	lo, hi, err := pickRange(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return lo, hi
}

// testPrefix names this test's reservations apart from every other user's.
func testPrefix(t *testing.T) string {
	return reservationPrefix + t.Name() + "-" + strconv.Itoa(os.Getpid()) + "-"
}

// TestFreeSkipsReservedPorts: a port another holder reserved, or that
// something already listens on, is never handed out, nor is a port twice;
// when none is left the error says so.
func TestFreeSkipsReservedPorts(t *testing.T) {
	lo, _ := ephemeralRange(t)
	prefix := testPrefix(t)
	held, ok, err := reserve(prefix, lo) // another holder's reservation
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
		if ok, err := listenable(p); err == nil && ok {
			free[p] = true
		}
	}
	var hi int // the range: the reserved port, up to the listened one, and three free ones after it
	for p := range free {
		hi = max(hi, p)
	}
	got := map[int]bool{}
	for {
		p, err := freeIn(prefix, lo, hi, 1)
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
	if _, err := freeIn(prefix, lo, hi, 1); err == nil {
		t.Fatal("no error once every port is taken")
	}
}

// TestFreeRunReservesEveryPort: each port of a run is reserved, and no
// run overlaps a reserved port.
func TestFreeRunReservesEveryPort(t *testing.T) {
	lo, hi := ephemeralRange(t)
	prefix := testPrefix(t)
	p, err := freeIn(prefix, lo, hi, 5)
	if err != nil {
		t.Fatal(err)
	}
	for q := p; q < p+5; q++ {
		if r, ok, err := reserve(prefix, q); err != nil || ok {
			if r != nil {
				r.Close()
			}
			t.Fatalf("port %d of the run %d-%d is not reserved (ok=%v err=%v)", q, p, p+4, ok, err)
		}
	}
	if p < lo || p+4 > hi {
		t.Fatalf("run %d-%d leaves the range %d-%d", p, p+4, lo, hi)
	}
	// The one run of 5 in p..p+4 is taken, and so is every run of 2 there.
	for _, n := range []int{5, 2} {
		if q, err := freeIn(prefix, p, p+4, n); err == nil {
			t.Fatalf("run of %d at %d handed out inside the reserved run %d-%d", n, q, p, p+4)
		}
	}
}

// TestFreeAcrossProcesses: a port reserved by this process is not handed
// out in another one (the test binary run again), and is once released.
func TestFreeAcrossProcesses(t *testing.T) {
	if spec := os.Getenv("TESTPORT_CHILD"); spec != "" {
		return // the child's work is in TestMain
	}
	lo, _ := ephemeralRange(t)
	prefix := testPrefix(t)
	var port int
	for p := lo; ; p++ {
		if ok, err := listenable(p); err == nil && ok {
			port = p
			break
		}
	}
	held, ok, err := reserve(prefix, port)
	if err != nil || !ok {
		t.Fatalf("reserve %d: ok=%v err=%v", port, ok, err)
	}
	child := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TESTPORT_CHILD="+prefix+":"+strconv.Itoa(port))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return string(out)
	}
	if got := child(); got != "taken\n" {
		t.Fatalf("another process was handed the reserved port %d: %q", port, got)
	}
	held.Close()
	if got, want := child(), strconv.Itoa(port)+"\n"; got != want {
		t.Fatalf("released port %d not handed out to another process: %q", port, got)
	}
}

// TestMain runs TestFreeAcrossProcesses's child: pick from the one port
// named in TESTPORT_CHILD and print it, or "taken".
func TestMain(m *testing.M) {
	if spec := os.Getenv("TESTPORT_CHILD"); spec != "" {
		i := len(spec) - 1
		for spec[i] != ':' {
			i--
		}
		port, _ := strconv.Atoi(spec[i+1:])
		if p, err := freeIn(spec[:i], port, port, 1); err != nil {
			os.Stdout.WriteString("taken\n")
		} else {
			os.Stdout.WriteString(strconv.Itoa(p) + "\n")
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestPickRange(t *testing.T) {
	for _, tc := range []struct {
		ephemeral string
		lo, hi    int
		fails     bool
	}{
		{"32768\t60999\n", 20768, 32767, false},
		{"", 20768, 32767, false},        // unreadable: the default
		{"garbage", 20768, 32767, false}, // likewise
		{"49152 65535", 37152, 49151, false},
		{"10000 60999", 1024, 9999, false},  // below is the larger span
		{"1024 50000", 50001, 62000, false}, // nothing below
		{"1024 65535", 0, 0, true},
	} {
		lo, hi, err := pickRange(tc.ephemeral)
		if (err != nil) != tc.fails || lo != tc.lo || hi != tc.hi {
			t.Errorf("pickRange(%q) = %d, %d, %v; want %d, %d, fails %v", tc.ephemeral, lo, hi, err, tc.lo, tc.hi, tc.fails)
		}
	}
}

// TestFreeOutsideEphemeralRange: the ports come from outside the range the
// kernel takes outgoing connections' ports from, as this machine sets it.
func TestFreeOutsideEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no /proc/sys/net/ipv4/ip_local_port_range")
	}
	var elo, ehi int
	if _, err := fmt.Sscan(string(b), &elo, &ehi); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		p, err := Free()
		if err != nil {
			t.Fatal(err)
		}
		if p >= elo && p <= ehi {
			t.Fatalf("port %d inside the ephemeral range %d-%d", p, elo, ehi)
		}
	}
}

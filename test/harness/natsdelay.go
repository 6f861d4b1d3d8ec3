package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// NATSDelay is a TCP proxy in front of a nats-server that makes the server
// slow for chosen subjects: what a client publishes to a subject Match
// accepts reaches the server Delay after the proxy read it. Order is kept
// per connection, so everything the client sent after a held message waits
// behind it, as it would behind a server busy with that message (a KV put
// to a degraded bucket). What the server sends is passed through at once.
//
// Only the client-to-server direction is parsed, and only as far as framing
// needs: PUB and HPUB carry a payload of a size given on their line, every
// other operation (CONNECT, SUB, UNSUB, PING, PONG) is one line. No TLS.
type NATSDelay struct {
	URL string // nats://<host>:<port> for clients

	upstream string // the server's host:port
	delay    time.Duration
	match    func(subject string) bool
	ln       net.Listener
	delayed  atomic.Int64

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartNATSDelay starts a proxy to the server at url (nats://host:port).
// match is called once per published message, in the order the client sent
// them, and may keep state (hold every sixth, hold the first). The proxy
// closes on cleanup.
func StartNATSDelay(t testing.TB, url string, delay time.Duration, match func(subject string) bool) *NATSDelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &NATSDelay{URL: "nats://" + ln.Addr().String(), upstream: strings.TrimPrefix(url, "nats://"),
		delay: delay, match: match, ln: ln}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Delayed returns how many messages the proxy has held so far.
func (p *NATSDelay) Delayed() int { return int(p.delayed.Load()) }

// Close stops accepting and drops every connection.
func (p *NATSDelay) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *NATSDelay) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // server → client, as it comes
			defer p.wg.Done()
			_, _ = io.Copy(client, server)
			_ = client.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.forward(client, server)
			_ = server.Close()
		}()
	}
}

// frame is one client operation, whole, and when it may go to the server.
type frame struct {
	b  []byte
	at time.Time
}

// forward copies client → server one operation at a time: a reader parses
// and stamps the operations, a writer sends each at its time, in order.
func (p *NATSDelay) forward(client, server net.Conn) {
	frames := make(chan frame, 1024) // full: the reader waits, as a client does on a slow server
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := bufio.NewWriter(server)
		for f := range frames {
			if d := time.Until(f.at); d > 0 {
				if w.Flush() != nil {
					break
				}
				time.Sleep(d)
			}
			if _, err := w.Write(f.b); err != nil {
				break
			}
			if len(frames) == 0 && w.Flush() != nil {
				break
			}
		}
		_ = server.Close()
		for range frames { // let the reader finish
		}
	}()
	r := bufio.NewReader(client)
	for {
		b, subj, err := readOp(r)
		if err != nil {
			break
		}
		f := frame{b: b}
		if subj != "" && p.match(subj) {
			p.delayed.Add(1)
			f.at = time.Now().Add(p.delay)
		}
		frames <- f
	}
	close(frames)
	<-done
}

// readOp reads one client operation and returns its bytes and, for PUB and
// HPUB, its subject.
func readOp(r *bufio.Reader) ([]byte, string, error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, "", err
	}
	fields := strings.Fields(string(line))
	if len(fields) == 0 {
		return line, "", nil
	}
	switch op := strings.ToUpper(fields[0]); op {
	case "PUB", "HPUB":
		// PUB <subject> [reply] <size>; HPUB <subject> [reply] <header size> <total size>
		n := 3
		if op == "HPUB" {
			n = 4
		}
		if len(fields) != n && len(fields) != n+1 {
			return nil, "", fmt.Errorf("malformed %s line %q", op, line)
		}
		size, err := strconv.Atoi(fields[len(fields)-1])
		if err != nil || size < 0 {
			return nil, "", fmt.Errorf("malformed %s line %q", op, line)
		}
		b := make([]byte, len(line)+size+2) // the payload and its \r\n
		copy(b, line)
		if _, err := io.ReadFull(r, b[len(line):]); err != nil {
			return nil, "", err
		}
		return b, fields[1], nil
	}
	return line, "", nil
}

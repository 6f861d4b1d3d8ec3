package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opswire/opswire/shared/envelope"
	"github.com/opswire/opswire/shared/events"
	"github.com/opswire/opswire/test/harness"
)

// rawLeaf is a leaf-node connection to the hub spoken by hand, as anything
// holding a cluster's leaf password could: it sends what a nats-server leaf
// would not (a source delivery whose $JS.ACK reply names, after '@', another
// cluster's subject).
type rawLeaf struct {
	conn net.Conn
	wmu  sync.Mutex

	mu       sync.Mutex
	creates  []sourceCreate       // source consumer create requests seen
	interest map[string]time.Time // subjects the hub announced (LS+), until withdrawn (LS-)
	errs     []string
}

func dialRawLeaf(t *testing.T, addr, caFile, user, password string) *rawLeaf {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("raw leaf: first line %q (%v), want INFO", line, err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("raw leaf: TLS: %v", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	l := &rawLeaf{conn: tc, interest: map[string]time.Time{}}
	connect, _ := json.Marshal(map[string]any{"user": user, "pass": password, "headers": true,
		"name": "raw-leaf-" + user, "server_id": fmt.Sprintf("NRAWLEAF%d", time.Now().UnixNano())})
	pong := make(chan struct{}, 1)
	go l.read(bufio.NewReader(tc), pong)
	l.write(t, "CONNECT "+string(connect)+"\r\nPING\r\n")
	select {
	case <-pong:
	case <-time.After(20 * time.Second):
		t.Fatal("raw leaf: no PONG from the hub in 20s")
	}
	return l
}

func (l *rawLeaf) write(t *testing.T, s string) {
	t.Helper()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if _, err := l.conn.Write([]byte(s)); err != nil {
		t.Errorf("raw leaf: write: %v", err)
	}
}

// read answers PINGs, follows the hub's interest (LS+/LS-) and keeps the
// start sequence of every source consumer create request it receives.
func (l *rawLeaf) read(br *bufio.Reader, pong chan struct{}) {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			l.mu.Lock()
			l.errs = append(l.errs, "read: "+err.Error())
			l.mu.Unlock()
			return
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "PING":
			l.wmu.Lock()
			_, _ = l.conn.Write([]byte("PONG\r\n"))
			l.wmu.Unlock()
		case "PONG":
			select {
			case pong <- struct{}{}:
			default:
			}
		case "-ERR":
			l.mu.Lock()
			l.errs = append(l.errs, strings.TrimSpace(line))
			l.mu.Unlock()
		case "LS+", "LS-":
			if len(f) > 1 {
				l.mu.Lock()
				if f[0] == "LS+" {
					l.interest[f[1]] = time.Now()
				} else {
					delete(l.interest, f[1])
				}
				l.mu.Unlock()
			}
		case "LMSG", "HMSG":
			size, _ := strconv.Atoi(f[len(f)-1])
			hdr := 0
			if f[0] == "HMSG" {
				hdr, _ = strconv.Atoi(f[len(f)-2])
			}
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(br, buf); err != nil {
				return
			}
			if strings.HasPrefix(f[1], "$JS.a.API.CONSUMER.CREATE.") && hdr <= size {
				var req struct {
					Config struct {
						DeliverSubject string `json:"deliver_subject"`
						OptStartSeq    uint64 `json:"opt_start_seq"`
					} `json:"config"`
				}
				reply := ""
				if (f[0] == "HMSG" && len(f) == 5) || (f[0] == "LMSG" && len(f) == 4) {
					reply = f[2]
				}
				if json.Unmarshal(buf[hdr:size], &req) == nil && req.Config.DeliverSubject != "" {
					l.mu.Lock()
					l.creates = append(l.creates, sourceCreate{reply: reply, start: req.Config.OptStartSeq})
					l.mu.Unlock()
				}
			}
		}
	}
}

// sourceCreate is one consumer create request of a hub's source.
type sourceCreate struct {
	reply string // where the answer goes ($JSC.R.a.…)
	start uint64 // opt_start_seq
}

func (l *rawLeaf) lastCreate() (sourceCreate, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.creates) == 0 {
		return sourceCreate{}, 0
	}
	return l.creates[len(l.creates)-1], len(l.creates)
}

// fleetForgedSource: a raw leaf connection as leaf-a gets messages stored
// in the fleet OPS as ops.b.…, through a's own source (docs/fleet.md#trust):
// after a's link was cut, the hub's new source consumer is announced to every
// leaf of leaf-a (its deliver subject and its flow-control subject, which
// carries its name), and the raw leaf delivers first, with the $JS.ACK reply
// of delivery 1 at the start sequence and "@ops.b.…" after it. Delivery 2
// also smuggles a Nats-Stream-Source header claiming b's source behind a
// bare "\n", which the hub keeps in front of its own. The hub stores both;
// the notifier terminates, logs and counts both (foreign_source), and
// neither becomes a card or an outcome.
func fleetForgedSource(t *testing.T, f *fleet) {
	t.Helper()
	outcomes := subscribeLive(t, f.audit, "notify.>")
	leaf := dialRawLeaf(t, f.hubLeaf, f.caFile, "leaf-a", f.pw["leaf_a"])
	leaf.write(t, "LS+ $JS.a.API.CONSUMER.CREATE.OPS.>\r\nPING\r\n")

	forged := "ops.b.cleanup.deleted.shop.forged-by-a"
	ev, err := envelope.New("cleanup/forged-by-a/deleted", envelope.Source("b", "cleanup"), events.TypeCleanup, "shop/forged-by-a",
		events.CleanupDecision{Verb: "deleted", Namespace: "shop", Pod: "forged-by-a", PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := ev.Msg(forged)
	smuggled := "ops.b.cleanup.deleted.shop.smuggled-by-a"
	sev, err := envelope.New("cleanup/smuggled-by-a/deleted", envelope.Source("b", "cleanup"), events.TypeCleanup, "shop/smuggled-by-a",
		events.CleanupDecision{Verb: "deleted", Namespace: "shop", Pod: "smuggled-by-a", PodReason: "Evicted", Severity: events.SeverityWarning, Time: time.Now()}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sm := sev.Msg(smuggled)
	hdr := rawHeader(m, "")
	// nats-server removes a received Nats-Stream-Source only after "\r\n";
	// nats.go splits header lines on a bare "\n" too.
	shdr := rawHeader(sm, "X-Opswire-Smuggle: 1\nNats-Stream-Source: OPS:b 1 ops.b.> > "+smuggled+"\r\n")

	// While a's link is cut only the raw leaf answers the hub's source
	// consumer requests (leaf-a may publish $JSC.R.a.>): it names a
	// consumer and a deliver subject under fleet.a.>, then delivers on it.
	a := f.edges["a"]
	a.link.Cut()
	var answered int
	var lastStart uint64
	harness.Eventually(t, 120*time.Second, "the forged and the smuggled ops.b messages in the fleet OPS", func() bool {
		if stored := streamSubjects(t, f.auditJS, "OPS", "ops.b.>"); stored[forged] > 0 && stored[smuggled] > 0 {
			return true
		}
		req, n := leaf.lastCreate()
		if n == 0 || n == answered || req.reply == "" {
			return false
		}
		answered = n
		start := max(req.start, 1)
		lastStart = start
		name, deliver := fmt.Sprintf("RAW_%d", n), fmt.Sprintf("fleet.a.S.raw%d", n)
		now := time.Now().UTC().Format(time.RFC3339Nano)
		resp, _ := json.Marshal(map[string]any{
			"type": "io.nats.jetstream.api.v1.consumer_create_response", "stream_name": "OPS", "name": name, "created": now, "ts": now,
			"config": map[string]any{"name": name, "deliver_subject": deliver, "deliver_policy": "by_start_sequence", "opt_start_seq": start,
				"ack_policy": "none", "max_deliver": 1, "filter_subject": "ops.a.>", "replay_policy": "instant", "flow_control": true,
				"idle_heartbeat": 1000000000, "direct": true, "num_replicas": 0},
			"delivered": map[string]any{"consumer_seq": 0, "stream_seq": start - 1},
			"ack_floor": map[string]any{"consumer_seq": 0, "stream_seq": start - 1},
		})
		leaf.write(t, fmt.Sprintf("LMSG %s %d\r\n%s\r\nPING\r\n", req.reply, len(resp), resp))
		// The hub subscribes to the deliver subject once it took the answer.
		listening := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !listening; time.Sleep(50 * time.Millisecond) {
			leaf.mu.Lock()
			_, listening = leaf.interest[deliver]
			leaf.mu.Unlock()
		}
		if !listening {
			t.Logf("raw leaf: the hub did not take the answer to create request %d", n)
			return false
		}
		reply := fmt.Sprintf("$JS.ACK.OPS.%s.1.%d.1.%d.1@%s", name, start, time.Now().UnixNano(), forged)
		leaf.write(t, fmt.Sprintf("HMSG %s %s %d %d\r\n%s%s\r\n", deliver, reply, len(hdr), len(hdr)+len(m.Data), hdr, m.Data))
		reply = fmt.Sprintf("$JS.ACK.OPS.%s.1.%d.2.%d.0@%s", name, start+1, time.Now().UnixNano(), smuggled)
		leaf.write(t, fmt.Sprintf("HMSG %s %s %d %d\r\n%s%s\r\nPING\r\n", deliver, reply, len(shdr), len(shdr)+len(sm.Data), shdr, sm.Data))
		t.Logf("raw leaf: answered create request %d (start %d) as consumer %s on %s, and delivered", n, start, name, deliver)
		return false
	})
	// The two deliveries took a's source sequences start and start+1 in the
	// hub's reckoning, so the hub resumes a's source after them: a's own
	// messages at those sequences are never sourced (a can only suppress
	// its own). Decisions made while the link is still cut fill them, so a's
	// next decision after the restore lands beyond.
	for i := 0; opsLastSeq(t, a.auditJS) < lastStart+1; i++ {
		if i == 5 {
			t.Fatalf("a's OPS at %d after 5 filler decisions, want %d", opsLastSeq(t, a.auditJS), lastStart+1)
		}
		filler := a.evictPods(t, fmt.Sprintf("filler-a-%d", i), 1)[0]
		harness.Eventually(t, 60*time.Second, "a's filler decision in its own OPS", func() bool {
			return streamSubjects(t, a.auditJS, "OPS", "ops.a.cleanup.deleted.>")["ops.a.cleanup.deleted.shop."+filler] > 0
		})
	}
	a.link.Restore()
	foreign := `opswire_notifier_messages_total{consumer="feishu",result="foreign_source"}`
	harness.Eventually(t, 30*time.Second, "the notifier terminating the forged and the smuggled message", func() bool {
		return f.notifier.Metric(foreign) >= 2
	})
	if !strings.Contains(f.notifier.Logs(), "outside the filter of the source") {
		t.Error("the notifier did not log the forged message")
	}
	// a's next decision still reaches the hub and its card (the source recovered).
	after := a.evictPods(t, "after-raw-a", 1)[0]
	harness.Eventually(t, 120*time.Second, "a's next decision's card", func() bool {
		return cardsNaming(f.cardTexts(), []string{after})[after] == 1
	})
	for _, text := range f.cardTexts() {
		if strings.Contains(text, "forged-by-a") || strings.Contains(text, "smuggled-by-a") {
			t.Errorf("a card names a forged message:\n%s", text)
		}
	}
	outcomes.mu.Lock()
	for _, o := range outcomes.msgs {
		if strings.Contains(string(o.Data), "forged-by-a") || strings.Contains(string(o.Data), "smuggled-by-a") {
			t.Errorf("outcome %s names a forged message: %s", o.Subject, o.Data)
		}
	}
	outcomes.mu.Unlock()
	if n := f.notifier.Metric(foreign); n != 2 {
		t.Errorf("%s = %v, want 2", foreign, n)
	}
	t.Logf("a raw leaf as leaf-a got %s and %s (a smuggled source header) stored in the fleet OPS; the notifier terminated both (foreign_source 2): no card, no outcome", forged, smuggled)
}

// opsLastSeq is the last sequence of the OPS stream js reads (0 if unknown).
func opsLastSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "OPS")
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.LastSeq
}

// rawHeader is m's header block as sent on the wire, with extra (whole
// lines, as written) after m's own headers.
func rawHeader(m *nats.Msg, extra string) string {
	var b strings.Builder
	b.WriteString("NATS/1.0\r\n")
	for k, vs := range m.Header {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString(extra)
	b.WriteString("\r\n")
	return b.String()
}

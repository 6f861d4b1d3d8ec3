package kubestate

import (
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ackMeta reads what the mirror needs of a message's JetStream metadata
// (stream sequence, pending count, stored time in Unix nanoseconds) straight
// from its ack reply subject. jetstream's Msg.Metadata reads the same
// tokens but allocates a MsgMetadata and its strings for every message:
// 155,000 of them when a leader loads the state (issue 18). The rules are
// Metadata's (nats.go internal/parser.GetMetadataFields and ParseNum):
//
//	v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	v2: $JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>...]
//
// and a number token that is not all digits reads as 0, as there. ok is
// false where Metadata would fail (no reply, another shape); the caller then
// asks Metadata itself, so the two never disagree.
func ackMeta(msg jetstream.Msg) (seq, pending uint64, stampNs int64, ok bool) {
	reply := msg.Reply()
	const prefix = "$JS.ACK."
	if !strings.HasPrefix(reply, prefix) {
		return 0, 0, 0, false
	}
	// The tokens after the prefix: at most the 9 v2 tokens Metadata reads.
	var tok [9]string
	n := 0
	for rest := reply[len(prefix):]; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			if n < len(tok) {
				tok[n] = rest
			}
			n++
			break
		}
		if n < len(tok) {
			tok[n] = rest[:i]
		}
		n++
		rest = rest[i+1:]
	}
	var s, tm, p string
	switch total := n + 2; {
	case total == 9: // v1
		s, tm, p = tok[3], tok[5], tok[6]
	case total >= 11: // v2
		s, tm, p = tok[5], tok[7], tok[8]
	default:
		return 0, 0, 0, false
	}
	return ackNum(s), ackNum(p), int64(ackNum(tm)), true
}

// ackNum is nats.go's parser.ParseNum: digits only (anything else reads as
// 0), no overflow check.
func ackNum(d string) (n uint64) {
	for i := 0; i < len(d); i++ {
		c := d[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

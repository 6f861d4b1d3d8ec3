package images

import (
	"strings"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/events"
)

const gib = int64(1) << 30

func TestDecide(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	th := Thresholds{MaxBytes: 50 * gib, MaxPercent: 50, GrowthBytes: 5 * gib, Cooldown: time.Hour}
	node := func(bytes, capacity int64) *events.NodeState {
		return &events.NodeState{Name: "n1", UID: "u1", ResourceVersion: "7", ImageBytes: bytes, EphemeralBytes: capacity}
	}
	alerted := func(ago time.Duration, bytes int64) Memory {
		return Memory{AlertedAt: now.Add(-ago), AlertedBytes: bytes, Active: true}
	}
	tests := []struct {
		name        string
		node        *events.NodeState
		mem         Memory
		th          Thresholds
		wantReason  string
		wantChanged bool
		wantActive  bool
		wantRecheck time.Duration
	}{
		{name: "under both thresholds", node: node(10*gib, 200*gib), th: th},
		{name: "over maxBytes", node: node(51*gib, 500*gib), th: th, wantReason: ReasonMaxBytes, wantChanged: true, wantActive: true},
		{name: "exactly maxBytes is not over", node: node(50*gib, 500*gib), th: th},
		{name: "over maxPercent", node: node(30*gib, 40*gib), th: th, wantReason: ReasonMaxPercent, wantChanged: true, wantActive: true},
		{name: "percent needs a known capacity", node: node(30*gib, 0), th: th},
		{name: "maxBytes disabled", node: node(60*gib, 500*gib), th: Thresholds{MaxPercent: 50, Cooldown: time.Hour}},
		{name: "already alerted, small growth", node: node(54*gib, 500*gib), mem: alerted(2*time.Hour, 51*gib), th: th, wantActive: true},
		{name: "growth within the cooldown is held back", node: node(60*gib, 500*gib), mem: alerted(20*time.Minute, 51*gib), th: th, wantActive: true, wantRecheck: 40 * time.Minute},
		{name: "growth after the cooldown", node: node(60*gib, 500*gib), mem: alerted(61*time.Minute, 51*gib), th: th, wantReason: ReasonGrowth, wantChanged: true, wantActive: true},
		{name: "growth must exceed growthBytes", node: node(56*gib, 500*gib), mem: alerted(2*time.Hour, 51*gib), th: th, wantActive: true},
		{name: "drop under the thresholds re-arms", node: node(20*gib, 500*gib), mem: alerted(10*time.Minute, 51*gib), th: th, wantChanged: true},
		{name: "re-crossing within the cooldown waits", node: node(52*gib, 500*gib), mem: Memory{AlertedAt: now.Add(-10 * time.Minute), AlertedBytes: 51 * gib}, th: th, wantRecheck: 50 * time.Minute},
		{name: "re-crossing after the cooldown alerts", node: node(52*gib, 500*gib), mem: Memory{AlertedAt: now.Add(-2 * time.Hour), AlertedBytes: 51 * gib}, th: th, wantReason: ReasonMaxBytes, wantChanged: true, wantActive: true},
		{name: "zero cooldown", node: node(57*gib, 500*gib), mem: alerted(time.Second, 51*gib), th: Thresholds{MaxBytes: 50 * gib, GrowthBytes: 5 * gib}, wantReason: ReasonGrowth, wantChanged: true, wantActive: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.node, tc.mem, tc.th, now)
			if d.Reason != tc.wantReason || d.Changed != tc.wantChanged || d.Memory.Active != tc.wantActive || d.RecheckAfter != tc.wantRecheck {
				t.Fatalf("decision %+v, want reason %q changed %v active %v recheck %s", d, tc.wantReason, tc.wantChanged, tc.wantActive, tc.wantRecheck)
			}
			if d.Reason != "" && (!d.Memory.AlertedAt.Equal(now) || d.Memory.AlertedBytes != tc.node.ImageBytes) {
				t.Fatalf("an alert must remember its time and bytes: %+v", d.Memory)
			}
			if d.Reason == "" && d.Memory.AlertedAt != tc.mem.AlertedAt {
				t.Fatalf("no alert must keep the last alert time")
			}
		})
	}
}

// The acceptance sequence: cross → one alert; growth within the cooldown →
// none; after the cooldown, growth beyond growthBytes → one more.
func TestDecideSequence(t *testing.T) {
	th := Thresholds{MaxBytes: 100, GrowthBytes: 10, Cooldown: time.Minute}
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		after time.Duration
		bytes int64
		want  string
	}{
		{0, 90, ""},
		{time.Second, 101, ReasonMaxBytes},
		{2 * time.Second, 150, ""}, // growth within the cooldown
		{3 * time.Second, 160, ""},
		{61 * time.Second, 165, ReasonGrowth}, // after the cooldown, grown 64 > 10
		{62 * time.Second, 170, ""},
	}
	var mem Memory
	alerts := 0
	for _, s := range steps {
		n := &events.NodeState{Name: "n", UID: "u", ImageBytes: s.bytes}
		d := Decide(n, mem, th, start.Add(s.after))
		if d.Reason != s.want {
			t.Fatalf("at +%s with %d bytes: reason %q, want %q", s.after, s.bytes, d.Reason, s.want)
		}
		if d.Reason != "" {
			alerts++
		}
		mem = d.Memory
	}
	if alerts != 2 {
		t.Fatalf("%d alerts, want 2", alerts)
	}
}

func TestAlertPayloadAndID(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	n := &events.NodeState{Name: "n.example", UID: "u1", ResourceVersion: "42", ImageBytes: 80, ImageCount: 50, ImagesTruncated: true, EphemeralBytes: 100}
	th := Thresholds{MaxPercent: 50, GrowthBytes: 5}
	prev := Memory{AlertedBytes: 60, Active: true, AlertedAt: now.Add(-time.Hour)}
	d := Decide(n, prev, th, now)
	a := Alert(n, d, prev, th, "Node image storage", now)
	if a.Reason != ReasonGrowth || a.PreviousBytes != 60 || !a.ImagesTruncated || a.Percent != 80 || a.ImageCount != 50 || a.Node != "n.example" {
		t.Fatalf("alert %+v", a)
	}
	if id := AlertID(n, d.Reason, now); id != "report/images/u1/growth/42" {
		t.Fatalf("id %s", id)
	}
	n.ResourceVersion = ""
	if id := AlertID(n, d.Reason, now); id != "report/images/u1/growth/t20250101T000000Z" {
		t.Fatalf("id without resourceVersion %s", id)
	}
}

// TestDecideTruncatedList: the kubelet's 50-image cap must not keep a node
// silent. 50 images of 1 GB list 46.6 GiB, under 50 GiB: with the default
// truncatedPercent (80) that alerts as truncated, says "at least", and a real
// crossing later still alerts.
func TestDecideTruncatedList(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	th := Thresholds{MaxBytes: 50 * gib, MaxPercent: 50, GrowthBytes: 5 * gib, Cooldown: time.Hour, TruncatedPercent: 80}
	listed := int64(50 * 1_000_000_000) // 46.6 GiB
	n := &events.NodeState{Name: "n1", UID: "u1", ResourceVersion: "7", ImageBytes: listed, ImageCount: 50,
		ImagesTruncated: true, EphemeralBytes: 500 * gib}
	d := Decide(n, Memory{}, th, now)
	if d.Reason != ReasonTruncated || !d.Memory.Active || d.Memory.Reason != ReasonTruncated || d.Memory.UID != "u1" {
		t.Fatalf("truncated list at 46.6 GiB: decision %+v, want a truncated alert", d)
	}
	a := Alert(n, d, Memory{}, th, "t", now)
	if !a.ImagesTruncated || !strings.Contains(a.Note, "at least 46.6 GiB") || !strings.Contains(a.Note, "--node-status-max-images") {
		t.Fatalf("alert note %q", a.Note)
	}

	// The same figure, complete (not truncated), is simply under the threshold.
	full := *n
	full.ImagesTruncated = false
	if d := Decide(&full, Memory{}, th, now); d.Reason != "" {
		t.Fatalf("an exact 46.6 GiB alerted: %+v", d)
	}
	// Far below the threshold, a truncated list stays quiet.
	small := *n
	small.ImageBytes = 10 * gib
	if d := Decide(&small, Memory{}, th, now); d.Reason != "" {
		t.Fatalf("a truncated list at 10 GiB alerted: %+v", d)
	}
	// Still near: no repeat. Then the lower bound crosses 50 GiB (growth
	// under growthBytes): that escalates to maxBytes after the cooldown.
	mem := Decide(n, Memory{AlertedAt: now, AlertedBytes: listed, Active: true, Reason: ReasonTruncated}, th, now.Add(time.Minute)).Memory
	if mem.Reason != ReasonTruncated {
		t.Fatalf("memory %+v", mem)
	}
	over := *n
	over.ImageBytes = 51 * gib
	if d := Decide(&over, mem, th, now.Add(10*time.Minute)); d.Reason != "" || d.RecheckAfter != 50*time.Minute {
		t.Fatalf("escalation within the cooldown: %+v, want held back 50m", d)
	}
	if d := Decide(&over, mem, th, now.Add(2*time.Hour)); d.Reason != ReasonMaxBytes || d.Memory.Reason != ReasonMaxBytes {
		t.Fatalf("crossing after a truncated alert: %+v, want maxBytes", d)
	}
	// truncatedPercent 0: the thresholds apply to the lower bound only.
	th.TruncatedPercent = 0
	if d := Decide(n, Memory{}, th, now); d.Reason != "" {
		t.Fatalf("rule off, 46.6 GiB alerted: %+v", d)
	}
}

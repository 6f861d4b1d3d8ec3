package config

import (
	"errors"
	"reflect"
	"testing"
)

const fleetReceivers = "notifier:\n  receivers:\n  - {name: ops, url: u}\n"

// TestNotifierFleetValidation: notifier.stream, notifier.clusters and
// routes[].clusters, each error naming its field.
func TestNotifierFleetValidation(t *testing.T) {
	tests := []struct {
		name, doc string
		fields    []string // empty: valid
	}{
		{"single cluster by default", fleetReceivers, nil},
		{"every cluster", fleetReceivers + "  stream: OPS_FLEET\n  clusters: ['*']\n", nil},
		{"a list of clusters", fleetReceivers + "  stream: FLEET\n  clusters: [a, b]\n  routes:\n  - {receivers: [ops], clusters: [b]}\n", nil},
		{"route clusters on one cluster", fleetReceivers + "  routes:\n  - {receivers: [ops], clusters: [prod, staging]}\n", nil},
		{"route clusters with every cluster", fleetReceivers + "  clusters: ['*']\n  routes:\n  - {receivers: [ops], clusters: [anything]}\n", nil},
		{"case-insensitive keys", "Notifier:\n  Receivers:\n  - {name: ops, url: u}\n  Stream: F\n  CLUSTERS: [a]\n  Routes:\n  - {receivers: [ops], Clusters: [a]}\n", nil},
		{"empty stream", fleetReceivers + "  stream: ''\n", []string{"notifier.stream"}},
		{"stream with a dot", fleetReceivers + "  stream: ops.fleet\n", []string{"notifier.stream"}},
		{"stream with a space", fleetReceivers + "  stream: 'OPS FLEET'\n", []string{"notifier.stream"}},
		{"star among others", fleetReceivers + "  clusters: [a, '*']\n", []string{"notifier.clusters[1]"}},
		{"empty cluster", fleetReceivers + "  clusters: [a, '']\n", []string{"notifier.clusters[1]"}},
		{"cluster wildcard inside", fleetReceivers + "  clusters: ['a*', 'b.c', '>']\n", []string{"notifier.clusters[0]", "notifier.clusters[1]", "notifier.clusters[2]"}},
		{"duplicate cluster", fleetReceivers + "  clusters: [a, b, a]\n", []string{"notifier.clusters[2]"}},
		{"route cluster not read", fleetReceivers + "  clusters: [a, b]\n  routes:\n  - {receivers: [ops], clusters: [a, c]}\n", []string{"notifier.routes[0].clusters[1]"}},
		{"route cluster star", fleetReceivers + "  routes:\n  - {receivers: [ops], clusters: ['*']}\n", []string{"notifier.routes[0].clusters[0]"}},
		{"route cluster bad and duplicate", fleetReceivers + "  routes:\n  - {receivers: [ops]}\n  - {receivers: [ops], clusters: [x.y, b, b]}\n", []string{"notifier.routes[1].clusters[0]", "notifier.routes[1].clusters[2]"}},
		{"clusters not a list", fleetReceivers + "  clusters: a\n", []string{"notifier.clusters"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if len(tc.fields) == 0 {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("Parse error = %v, want Errors", err)
			}
			got := map[string]bool{}
			for _, fe := range errs {
				got[fe.Field] = true
			}
			for _, f := range tc.fields {
				if !got[f] {
					t.Errorf("errors %v do not name %q", err, f)
				}
			}
			if len(errs) != len(tc.fields) {
				t.Errorf("errors %v, want exactly %v", err, tc.fields)
			}
		})
	}
}

// TestNotifierFleetDefaults: without the new keys the notifier reads its own
// cluster from OPS, as before fleets.
func TestNotifierFleetDefaults(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		stream   string
		clusters []string
		fleet    bool
		reads    map[string]bool
	}{
		{"default", "", "OPS", nil, false, map[string]bool{"a": false}},
		{"every cluster", "notifier:\n  clusters: ['*']\n  stream: FLEET\n", "FLEET", []string{"*"}, true, map[string]bool{"a": true, "zz": true}},
		{"list", "notifier:\n  clusters: [a, b]\n", "OPS", []string{"a", "b"}, true, map[string]bool{"a": true, "b": true, "c": false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			n := c.Notifier
			if n.Stream != tc.stream || !reflect.DeepEqual(n.Clusters, tc.clusters) || n.Fleet() != tc.fleet {
				t.Errorf("stream %q clusters %v fleet %v, want %q %v %v", n.Stream, n.Clusters, n.Fleet(), tc.stream, tc.clusters, tc.fleet)
			}
			for cl, want := range tc.reads {
				if got := n.ReadsCluster(cl); got != want {
					t.Errorf("ReadsCluster(%q) = %v, want %v", cl, got, want)
				}
			}
		})
	}
}

package config

import (
	"fmt"
	"strings"
	"time"
)

// Controller holds the seed's global controller settings plus leader-election timing.
type Controller struct {
	// ControllerResyncPeriod is kept for seed compatibility; opswire actors use
	// each section's interval instead (event-driven plus a reconcile tick).
	ControllerResyncPeriod Duration `json:"controllerResyncPeriod"`
	// InformersResyncPeriod is kept for seed compatibility: the watcher's
	// informers never resync (a resync re-delivers objects its handlers drop
	// unread, and queues watch events behind 150,000 of them at scale).
	InformersResyncPeriod Duration `json:"InformersResyncPeriod"`
	LeaderElect           bool     `json:"LeaderElect"`
	LeaseLockName         string   `json:"leaseLockName"`
	LeaseLockNamespace    string   `json:"leaseLockNamespace"`
	LeaseDuration         Duration `json:"leaseDuration"`
	RenewDeadline         Duration `json:"renewDeadline"`
	RetryPeriod           Duration `json:"retryPeriod"`
}

func (c *Controller) setDefaults() {
	c.ControllerResyncPeriod = D(10 * time.Second)
	c.InformersResyncPeriod = D(30 * time.Second)
	c.LeaderElect = true
	c.LeaseLockName = "opswire"
	c.LeaseLockNamespace = "opswire"
	c.LeaseDuration = D(15 * time.Second)
	c.RenewDeadline = D(10 * time.Second)
	c.RetryPeriod = D(2 * time.Second)
}

func (c *Controller) validate(p string, errs *Errors) {
	if c.InformersResyncPeriod.Duration < 0 {
		errs.add(join(p, "InformersResyncPeriod"), "must not be negative")
	}
	if c.LeaderElect {
		if c.LeaseLockName == "" {
			errs.add(join(p, "leaseLockName"), "must not be empty when LeaderElect is true")
		}
		if c.LeaseLockNamespace == "" {
			errs.add(join(p, "leaseLockNamespace"), "must not be empty when LeaderElect is true")
		}
		if c.RetryPeriod.Duration <= 0 {
			errs.add(join(p, "retryPeriod"), "must be positive")
		}
		if c.RenewDeadline.Duration <= c.RetryPeriod.Duration {
			errs.add(join(p, "renewDeadline"), "must be greater than retryPeriod")
		}
		if c.LeaseDuration.Duration <= c.RenewDeadline.Duration {
			errs.add(join(p, "leaseDuration"), "must be greater than renewDeadline")
		}
	}
}

// Kube tunes the Kubernetes client.
type Kube struct {
	QPS   float32 `json:"qps"`
	Burst int     `json:"burst"`
	// ServerRequestTimeout is the API server's --request-timeout (60s
	// unless the cluster's operator changed it). A write whose answer was
	// lost can still commit until the API server gives up on it: cordon and
	// cleanup hold such a write in doubt, and a new leader waits for one,
	// for this long past their own deadline. A value shorter than the
	// server's lets them take a write that still lands for one that did
	// not; a longer one only waits longer.
	ServerRequestTimeout Duration `json:"serverRequestTimeout"`
}

// maxServerRequestTimeout bounds kube.serverRequestTimeout: a new leader
// may sit idle for about that long after a takeover, so a typo ("60m")
// must not make it an hour.
const maxServerRequestTimeout = 10 * time.Minute

func (k *Kube) setDefaults() {
	k.QPS, k.Burst = 50, 100
	k.ServerRequestTimeout = D(60 * time.Second)
}

func (k *Kube) validate(p string, errs *Errors) {
	if k.QPS <= 0 {
		errs.add(join(p, "qps"), "must be positive")
	}
	if k.Burst < 1 {
		errs.add(join(p, "burst"), "must be at least 1")
	}
	if d := k.ServerRequestTimeout.Duration; d < time.Second || d > maxServerRequestTimeout {
		errs.add(join(p, "serverRequestTimeout"), "must be between 1s and %v (the API server's --request-timeout; its default is 60s)", maxServerRequestTimeout)
	}
}

// NATS sets up the streams (DESIGN §3); connection settings come from flags.
type NATS struct {
	// Replicas of the KUBE and OPS streams and the KV buckets: 1 on a single
	// server, 3 on a JetStream cluster.
	Replicas int `json:"replicas"`
	// OpsMaxAge and OpsMaxBytes bound the OPS audit log.
	OpsMaxAge   Duration `json:"opsMaxAge"`
	OpsMaxBytes int64    `json:"opsMaxBytes"`
	// TombstoneTTL is how long a deleted object's tombstone stays in KUBE.
	TombstoneTTL Duration `json:"tombstoneTTL"`
	// Duplicates is the deduplication window of KUBE and of a cluster's OPS;
	// it must outlast the longest NATS outage a publisher retries through. A
	// fleet hub's sourced OPS deduplicates nothing (docs/fleet.md#trust).
	Duplicates Duration `json:"duplicates"`
	// OpsSources makes this the fleet hub's OPS (docs/fleet.md): a stream
	// with no subjects of its own that sources ops.<cluster>.> from the OPS
	// stream of each named cluster's JetStream domain (<cluster>, reached
	// over the leaf connection). A hub has no KUBE stream. Empty (the
	// default): OPS stores ops.> published to this server, as on an edge.
	OpsSources []string `json:"opsSources"`
}

func (n *NATS) setDefaults() {
	n.Replicas = 1
	n.OpsMaxAge = D(7 * 24 * time.Hour)
	n.OpsMaxBytes = 1 << 30
	n.TombstoneTTL = D(time.Hour)
	n.Duplicates = D(10 * time.Minute)
}

func (n *NATS) validate(p string, errs *Errors) {
	if n.Replicas < 1 || n.Replicas > 5 {
		errs.add(join(p, "replicas"), "must be between 1 and 5, got %d", n.Replicas)
	}
	if n.OpsMaxAge.Duration <= 0 {
		errs.add(join(p, "opsMaxAge"), "must be positive")
	}
	if n.OpsMaxBytes <= 0 {
		errs.add(join(p, "opsMaxBytes"), "must be positive")
	}
	if n.TombstoneTTL.Duration < time.Second {
		errs.add(join(p, "tombstoneTTL"), "must be at least 1s")
	}
	if n.Duplicates.Duration < time.Second {
		errs.add(join(p, "duplicates"), "must be at least 1s")
	}
	seen := map[string]bool{}
	for i, c := range n.OpsSources {
		switch {
		case c == "" || strings.ContainsAny(c, ".*> \t"):
			errs.add(fmt.Sprintf("%s[%d]", join(p, "opsSources"), i), "%q must be a cluster name: one NATS subject token (no '.', '*', '>' or spaces)", c)
		case seen[c]:
			errs.add(fmt.Sprintf("%s[%d]", join(p, "opsSources"), i), "cluster %q is listed twice", c)
		}
		seen[c] = true
	}
}

// Watcher configures the informer-to-NATS bridge.
type Watcher struct {
	// PublishTimeout bounds one publish attempt; failed publishes are retried
	// with the same message id until they are stored.
	PublishTimeout Duration `json:"publishTimeout"`
	// Workers publish in parallel (objects are sharded by key, so each object's
	// updates stay in order).
	Workers int `json:"workers"`
	// MessageLimit truncates pod status messages to this many bytes.
	MessageLimit int `json:"messageLimit"`
	// NodeStatusMaxImages is the kubelets' --node-status-max-images (their
	// default 50; -1: no cap). A node listing exactly that many images may
	// have more (NodeState.ImagesTruncated); a longer or shorter list is
	// complete, so raising the kubelets' cap without this one would flag
	// complete lists as truncated.
	NodeStatusMaxImages int `json:"nodeStatusMaxImages"`
}

func (w *Watcher) setDefaults() {
	w.PublishTimeout = D(5 * time.Second)
	w.Workers = 4
	w.MessageLimit = 256
	w.NodeStatusMaxImages = 50
}

func (w *Watcher) validate(p string, errs *Errors) {
	if w.PublishTimeout.Duration <= 0 {
		errs.add(join(p, "publishTimeout"), "must be positive")
	}
	if w.Workers < 1 {
		errs.add(join(p, "workers"), "must be at least 1")
	}
	if w.MessageLimit < 0 {
		errs.add(join(p, "messageLimit"), "must not be negative")
	}
	if w.NodeStatusMaxImages < 1 && w.NodeStatusMaxImages != -1 {
		errs.add(join(p, "nodeStatusMaxImages"), "must be at least 1, or -1 (no cap), as the kubelet's --node-status-max-images")
	}
}

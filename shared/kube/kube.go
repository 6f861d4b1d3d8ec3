// Package kube builds the Kubernetes client configuration in the order of
// DESIGN §9: the --kubeconfig flag, $KUBECONFIG, ~/.kube/config, then the
// in-cluster ServiceAccount. Built-in types travel as protobuf, which halves
// LIST and WATCH cost on large clusters.
package kube

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options selects the credentials and tunes the client.
type Options struct {
	Kubeconfig string // flag value; empty means look further
	QPS        float32
	Burst      int
	UserAgent  string
}

// RESTConfig resolves the client configuration.
func RESTConfig(o Options) (*rest.Config, error) {
	cfg, source, err := load(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	if o.UserAgent != "" {
		cfg.UserAgent = o.UserAgent
	}
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	_ = source
	return cfg, nil
}

// Source reports which credentials RESTConfig would use, for the startup log.
func Source(flag string) string {
	_, source, err := load(flag)
	if err != nil {
		return "none"
	}
	return source
}

func load(flag string) (*rest.Config, string, error) {
	path, source := flag, "--kubeconfig"
	if path == "" {
		path, source = os.Getenv("KUBECONFIG"), "$KUBECONFIG"
	}
	if path == "" {
		if home, err := os.UserHomeDir(); err == nil {
			p := filepath.Join(home, ".kube", "config")
			if _, err := os.Stat(p); err == nil {
				path, source = p, "~/.kube/config"
			}
		}
	}
	if path != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
		if source == "$KUBECONFIG" {
			rules = &clientcmd.ClientConfigLoadingRules{Precedence: filepath.SplitList(path)}
		}
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("kubeconfig from %s: %w", source, err)
		}
		return cfg, source, nil
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, "", errors.New("no kubeconfig: pass --kubeconfig, set $KUBECONFIG, create ~/.kube/config, or run in a cluster")
		}
		return nil, "", fmt.Errorf("in-cluster config: %w", err)
	}
	return cfg, "in-cluster", nil
}

// NewClient builds a clientset from options.
func NewClient(o Options) (kubernetes.Interface, *rest.Config, error) {
	cfg, err := RESTConfig(o)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, cfg, nil
}

// Package kube builds the Kubernetes client configuration in the order of
// DESIGN §9: the --kubeconfig flag, $KUBECONFIG, ~/.kube/config, then the
// in-cluster ServiceAccount. Built-in types travel as protobuf, which halves
// LIST and WATCH cost on large clusters.
package kube

import (
	"errors"
	"fmt"
	"net/http"
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
	return NoWriteRetries(cfg), nil
}

// NoWriteRetries stops client-go from sending a write a second time on its
// own, and returns cfg.
//
// client-go's rest client repeats any request, writes included, up to ten
// times when the answer is a 429 or a 5xx carrying Retry-After
// (rest/with_retry.go). The API server answers an update or a delete that
// could not reach etcd in time with 500 and Retry-After, and by then the
// write may have been committed. The repeat then fails the preconditions
// opswire puts on every write (409 for a node patched on its old
// resourceVersion, 404 for a deleted pod), and the actor took the write it
// had done for someone else's: never audited, not counted in its rate
// window. Without Retry-After on the answers to writes, client-go hands the
// first answer to the actor, which holds the write in doubt until a read
// settles it (docs/actuate.md). Reads (GET, LIST, WATCH) keep client-go's
// retries: they change nothing.
func NoWriteRetries(cfg *rest.Config) *rest.Config {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return writeAnswers{next: rt} })
	return cfg
}

// writeAnswers drops Retry-After from the answers to writes (see
// NoWriteRetries).
type writeAnswers struct{ next http.RoundTripper }

func (w writeAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	if resp != nil && req.Method != http.MethodGet && req.Method != http.MethodHead {
		resp.Header.Del("Retry-After")
	}
	return resp, err
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

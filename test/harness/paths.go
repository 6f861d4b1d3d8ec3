package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Versions of the control plane; they match the client-go release the services use.
const (
	KubeVersion = "v1.37.2"
	EtcdVersion = "v3.6.16"
)

var (
	rootOnce sync.Once
	root     string
	rootErr  error
)

// RepoRoot is the directory holding go.work.
func RepoRoot() (string, error) {
	rootOnce.Do(func() {
		dir, err := os.Getwd()
		if err != nil {
			rootErr = err
			return
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
				root = dir
				return
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				rootErr = fmt.Errorf("go.work not found above the working directory")
				return
			}
			dir = parent
		}
	})
	return root, rootErr
}

// BinDir is where hack/build-controlplane.sh caches the binaries the tests
// run: $OPSWIRE_BIN_DIR, else opswire/bin in the user's cache directory (so a
// second clone on this machine reuses them).
func BinDir() (string, error) {
	if d := os.Getenv("OPSWIRE_BIN_DIR"); d != "" {
		return d, nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the control-plane binaries (set OPSWIRE_BIN_DIR): %w", err)
	}
	return filepath.Join(c, "opswire", "bin"), nil
}

// KubeBin is the path of a Kubernetes command (kube-apiserver, kubelet…) of
// KubeVersion; it fails the test, naming the make target, when it is missing.
func KubeBin(t testing.TB, name string) string {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(bin, "k8s-"+KubeVersion, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", p)
	}
	return p
}

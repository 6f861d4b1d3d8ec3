package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
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

// BinDir is where the control-plane binaries are cached ($OPSWIRE_BIN_DIR or .cache/bin).
func BinDir() (string, error) {
	if d := os.Getenv("OPSWIRE_BIN_DIR"); d != "" {
		return d, nil
	}
	r, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(r, ".cache", "bin"), nil
}

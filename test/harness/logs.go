package harness

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Process logs go to one directory per test. When the test passes the
// directory is removed; when it fails it is kept and the test prints a single
// line naming it. Dumping log tails into the test output instead would push
// the failure message itself out of sight in a CI excerpt; `hack/e2e.sh`
// prints the tails of kept logs after the whole run.
//
// OPSWIRE_E2E_LOGS chooses where the directories go (default: a folder in
// the system temp directory).

var (
	logDirsMu sync.Mutex
	logDirs   = map[testing.TB]string{}
)

// LogsRoot is where kept logs go.
func LogsRoot() string {
	if d := os.Getenv("OPSWIRE_E2E_LOGS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "opswire-e2e-logs")
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// LogDirer is a testing.TB that chooses where process logs go and owns
// them (the demo's environment, which removes its whole directory at exit).
type LogDirer interface {
	LogDir() string
}

// logPath returns a path for one process's log in the test's log directory,
// creating the directory (and its keep-or-remove cleanup) on first use.
func logPath(t testing.TB, file string) string {
	t.Helper()
	if p, ok := t.(*prefixedTB); ok {
		return logPath(p.TB, p.prefix+"-"+file)
	}
	if d, ok := t.(LogDirer); ok {
		return filepath.Join(d.LogDir(), unsafeName.ReplaceAllString(file, "_"))
	}
	logDirsMu.Lock()
	dir, ok := logDirs[t]
	logDirsMu.Unlock()
	if !ok {
		root := LogsRoot()
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		dir, err = os.MkdirTemp(root, unsafeName.ReplaceAllString(t.Name(), "_")+"-")
		if err != nil {
			t.Fatal(err)
		}
		logDirsMu.Lock()
		logDirs[t] = dir
		logDirsMu.Unlock()
		// Registered before the processes' own cleanups, so it runs after them.
		t.Cleanup(func() {
			logDirsMu.Lock()
			delete(logDirs, t)
			logDirsMu.Unlock()
			if !t.Failed() {
				os.RemoveAll(dir)
				os.Remove(root) // only if no other test's logs are kept there
				return
			}
			t.Logf("process logs kept in %s (%s)", dir, strings.Join(listLogs(dir), ", "))
		})
	}
	return filepath.Join(dir, unsafeName.ReplaceAllString(file, "_"))
}

func listLogs(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// prefixedTB names its processes' logs with a prefix.
type prefixedTB struct {
	testing.TB
	prefix string
}

// Prefixed is t with a prefix on the name of every process log started
// through it (a-etcd.log, a-apiserver.log), so that two control planes or
// services of the same name in one test (a fleet of clusters) keep separate
// logs. Everything else goes to t.
func Prefixed(t testing.TB, prefix string) testing.TB { return &prefixedTB{TB: t, prefix: prefix} }

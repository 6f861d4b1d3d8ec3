package demo

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	"github.com/opswire/opswire/test/harness"
)

// errFatal is what a failed harness call panics with (see Env.Fatalf).
var errFatal = errors.New("demo step failed")

// Env lets a program (not a test) use the harness, whose functions take a
// testing.TB: it implements the few methods the harness calls. Fatal panics
// with errFatal (the demo's steps recover it), Cleanup registers teardown that
// Close runs in reverse order, TempDir creates directories under one root
// that Close removes. Any other testing.TB method panics (nil embedded TB),
// which a demo run would show at once.
type Env struct {
	testing.TB // nil: only the overridden methods are used

	log io.Writer

	mu       sync.Mutex
	cleanups []func()
	root     string
	n        int
	failed   bool
	lastErr  string
}

// NewEnv creates the root of the demo's temporary directories.
func NewEnv(log io.Writer) (*Env, error) {
	root, err := os.MkdirTemp("", "opswire-demo-")
	if err != nil {
		return nil, err
	}
	return &Env{log: log, root: root}, nil
}

// Root is the directory holding every temporary file of the demo.
func (e *Env) Root() string { return e.root }

var _ harness.LogDirer = (*Env)(nil)

// LogDir is where the harness writes the logs of the demo's processes.
func (e *Env) LogDir() string {
	dir := e.root + "/logs"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.Fatalf("log dir: %v", err)
	}
	return dir
}

func (e *Env) Helper()      {}
func (e *Env) Name() string { return "opswire-demo" }

func (e *Env) Failed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

func (e *Env) Logf(format string, args ...any) { fmt.Fprintf(e.log, format+"\n", args...) }
func (e *Env) Log(args ...any)                 { fmt.Fprintln(e.log, args...) }

func (e *Env) Errorf(format string, args ...any) {
	e.mu.Lock()
	e.failed, e.lastErr = true, fmt.Sprintf(format, args...)
	e.mu.Unlock()
	fmt.Fprintf(e.log, "error: "+format+"\n", args...)
}
func (e *Env) Error(args ...any) { e.Errorf("%s", fmt.Sprint(args...)) }

func (e *Env) Fatalf(format string, args ...any) {
	e.Errorf(format, args...)
	panic(errFatal)
}
func (e *Env) Fatal(args ...any) { e.Fatalf("%s", fmt.Sprint(args...)) }
func (e *Env) FailNow()          { e.Fatalf("failed") }

// Cleanup registers f to run at Close, last registered first.
func (e *Env) Cleanup(f func()) {
	e.mu.Lock()
	e.cleanups = append(e.cleanups, f)
	e.mu.Unlock()
}

// TempDir returns a new directory under the demo's root.
func (e *Env) TempDir() string {
	e.mu.Lock()
	e.n++
	n := e.n
	e.mu.Unlock()
	dir := fmt.Sprintf("%s/%03d", e.root, n)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.Fatalf("temp dir: %v", err)
	}
	return dir
}

// Setenv sets an environment variable for the rest of the demo.
func (e *Env) Setenv(key, value string) {
	if err := os.Setenv(key, value); err != nil {
		e.Fatalf("setenv %s: %v", key, err)
	}
}

// Close runs every cleanup (stopping processes and servers) and removes the
// temporary directories.
func (e *Env) Close() {
	e.mu.Lock()
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		func() {
			defer func() { _ = recover() }() // a failing teardown must not stop the others
			cs[i]()
		}()
	}
	os.RemoveAll(e.root)
}

// step runs f, turning a harness failure (errFatal panic) into an error.
func (e *Env) step(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r != errFatal {
				panic(r)
			}
			e.mu.Lock()
			err = errors.New(e.lastErr)
			e.mu.Unlock()
		}
	}()
	f()
	return nil
}

// Package testkit holds the polling helpers every module's tests share, so
// that no package grows its own copy.
package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often Eventually and Never look at their condition.
const pollEvery = 20 * time.Millisecond

// Eventually polls cond every 20 ms until it is true, failing the test with
// what after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}

// Never checks that cond stays false for the whole duration (polling), failing
// the test as soon as it becomes true. Use it for "and not before" checks.
func Never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			t.Fatalf("%s happened, but must not within %v", what, d)
		}
		time.Sleep(pollEvery)
	}
}

package harness

import (
	"testing"
	"time"

	"github.com/opswire/opswire/shared/testkit"
)

// Eventually polls cond until it is true, failing the test with what after
// timeout (testkit.Eventually).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, what, cond)
}

// Never checks that cond stays false for the whole duration, failing the test
// as soon as it becomes true (testkit.Never). Use it for "and not before"
// checks.
func Never(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.Never(t, d, what, cond)
}

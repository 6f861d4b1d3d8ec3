package leader

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opswire/opswire/shared/testkit"
	"github.com/rs/zerolog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A replica whose credentials may not touch the Lease where the config puts
// it can never lead: it says so (Refused, OnRefused once) instead of only
// logging every retry, and the refusal clears once access is granted.
func TestRefusedLeaseIsReportedUntilGranted(t *testing.T) {
	tests := []struct {
		name    string
		refusal error
		refused bool
	}{
		{"forbidden", apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"},
			"opswire-test", nil), true},
		{"unauthorized", apierrors.NewUnauthorized("token expired"), true},
		{"a timeout says nothing about the permission", apierrors.NewTimeoutError("slow", 1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			var deny atomic.Bool
			deny.Store(true)
			client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if deny.Load() {
					return true, nil, tc.refusal
				}
				return false, nil, nil
			})
			e := New(client, cfg("a"), zerolog.Nop())
			var told atomic.Int32
			e.OnRefused = func(error) { told.Add(1) }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = e.Run(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil })
			}()
			defer func() { cancel(); <-done }()

			if !tc.refused {
				// Several retries pass; none is taken for a refusal.
				testkit.Eventually(t, 10*time.Second, "retries", func() bool { return len(client.Actions()) >= 3 })
				if err := e.Refused(); err != nil || told.Load() != 0 {
					t.Fatalf("Refused() = %v after %d notices; want nil", err, told.Load())
				}
				return
			}
			testkit.Eventually(t, 10*time.Second, "the refusal", func() bool { return e.Refused() != nil })
			testkit.Eventually(t, 10*time.Second, "retries", func() bool { return len(client.Actions()) >= 5 })
			if n := told.Load(); n != 1 {
				t.Fatalf("OnRefused called %d times over several refused retries; want once", n)
			}
			deny.Store(false)
			testkit.Eventually(t, 10*time.Second, "leading once granted", e.IsLeader)
			if err := e.Refused(); err != nil {
				t.Fatalf("Refused() = %v after the Lease was taken", err)
			}
		})
	}
}

// The watchdog's deadline follows the monotonic clock, so a step of the wall
// clock (NTP, a VM resumed) neither hastens nor delays it.
func TestRenewalTimeIsMonotonic(t *testing.T) {
	l := newRenewLock(nil, func(error) {})
	l.last.Store(int64(1500 * time.Millisecond))
	r := l.renewed()
	if !strings.Contains(r.String(), "m=+") {
		t.Fatalf("renewal time %v has no monotonic reading", r)
	}
	if got := r.Sub(l.base); got != 1500*time.Millisecond {
		t.Fatalf("renewed %v after base; want 1.5s", got)
	}
}

package actuate

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// TestRequeue: the one way a controller treats an actuator's result.
func TestRequeue(t *testing.T) {
	tests := []struct {
		name      string
		out       Outcome
		err       error
		wantFails int // the key's failure count afterwards
	}{
		{"done: failures forgotten", Outcome{}, nil, 0},
		{"not now: failures forgotten", Outcome{RequeueAfter: time.Hour}, nil, 0},
		{"retry quietly: backoff", Outcome{Retry: true}, nil, 2},
		{"failed: backoff", Outcome{}, errors.New("boom"), 2},
		{"failed while rate limited: backoff wins", Outcome{RequeueAfter: time.Hour}, errors.New("boom"), 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Hour, time.Hour))
			defer q.ShutDown()
			q.AddRateLimited("k") // one earlier failure
			Requeue(q, "k", tc.out, tc.err)
			if got := q.NumRequeues("k"); got != tc.wantFails {
				t.Fatalf("failures = %d, want %d", got, tc.wantFails)
			}
		})
	}
}

// TestCall: each call gets its own deadline, the default when none is set.
func TestCall(t *testing.T) {
	for _, tc := range []struct {
		timeout, want time.Duration
	}{{time.Second, time.Second}, {0, DefaultAPITimeout}} {
		start := time.Now()
		left, err := Call(context.Background(), tc.timeout, func(ctx context.Context) (time.Duration, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return 0, errors.New("no deadline")
			}
			return d.Sub(start), nil
		})
		if err != nil || left > tc.want+100*time.Millisecond || left < tc.want-time.Second/2 {
			t.Fatalf("timeout %v: deadline in %v (%v), want about %v", tc.timeout, left, err, tc.want)
		}
	}
	// A caller's earlier deadline still wins.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err := Call(ctx, time.Hour, func(ctx context.Context) (struct{}, error) {
		<-ctx.Done()
		return struct{}{}, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

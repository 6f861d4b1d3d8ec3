package actuate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestClassify: only a status the API server wrote tells whether a write
// happened; everything else (a 408 from a proxy included) leaves it unknown,
// for a node's patch as for a pod's delete.
func TestClassify(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	nodes := schema.GroupResource{Resource: "nodes"}
	for _, tc := range []struct {
		name string
		err  error
		want Answer
	}{
		{"nil", nil, AnswerDone},
		{"not found", apierrors.NewNotFound(pods, "p"), AnswerGone},
		{"conflict", apierrors.NewConflict(pods, "p", errors.New("precondition")), AnswerConflict},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), AnswerThrottled},
		{"forbidden (admission)", apierrors.NewForbidden(pods, "p", errors.New("denied by policy")), AnswerRefused},
		{"forbidden (rbac)", apierrors.NewForbidden(nodes, "a", errors.New("rbac")), AnswerRefused},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", nil), AnswerRefused},
		{"bad request", apierrors.NewBadRequest("no"), AnswerRefused},
		{"client deadline", &url.Error{Op: "Delete", URL: "https://api/p", Err: context.DeadlineExceeded}, AnswerUnknown},
		{"bare client deadline", context.DeadlineExceeded, AnswerUnknown},
		{"cancelled (term over)", fmt.Errorf("delete: %w", context.Canceled), AnswerUnknown},
		{"connection reset", &url.Error{Op: "Delete", URL: "https://api/p", Err: io.ErrUnexpectedEOF}, AnswerUnknown},
		{"reset without a URL", errors.New("read tcp: connection reset by peer"), AnswerUnknown},
		{"504 timeout", apierrors.NewTimeoutError("still processing", 0), AnswerUnknown},
		{"server timeout", apierrors.NewServerTimeout(pods, "delete", 0), AnswerUnknown},
		{"500 internal (etcd timeout)", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), AnswerUnknown},
		{"503", apierrors.NewServiceUnavailable("no endpoints"), AnswerUnknown},
		{"502 from a proxy", apierrors.NewGenericServerResponse(502, "DELETE", pods, "p", "bad gateway", 0, true), AnswerUnknown},
		{"408 from a proxy (the server may have gone on)", apierrors.NewGenericServerResponse(http.StatusRequestTimeout, "patch", nodes, "a", "", 0, true), AnswerUnknown},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStillUndecided(t *testing.T) {
	sent := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	h := LateCommitHorizon(DefaultAPITimeout, DefaultServerRequestTimeout)
	if h != 90*time.Second {
		t.Fatalf("LateCommitHorizon(defaults) = %v, want 90s (10s + 60s + 20s)", h)
	}
	for _, tc := range []struct {
		after   time.Duration
		waiting bool
	}{{0, true}, {h - time.Nanosecond, true}, {h, false}, {2 * h, false}} {
		err := StillUndecided("pod a/b", sent, h, sent.Add(tc.after))
		if got := errors.Is(err, ErrNotYetDecided); got != tc.waiting {
			t.Errorf("%v after the intent: undecided = %v (%v), want %v", tc.after, got, err, tc.waiting)
		}
	}
}

package kube

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestNoWriteRetries: an API server answering every request 500 with
// Retry-After (an update it could not finish in time). A write is sent once,
// whatever client-go would do; a read keeps client-go's retries. Without the
// wrapper client-go sends the write 11 times (found by review: a repeat of an
// applied write fails its preconditions and hides the write from the actor).
func TestNoWriteRetries(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServerTimeout","code":500}`))
	}))
	defer srv.Close()
	count := func(method string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[method]
	}
	for _, tc := range []struct {
		name   string
		wrap   bool
		writes int // requests the server sees for one PATCH or DELETE (0: more than one)
	}{
		{"client-go alone", false, 0},
		{"NoWriteRetries", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(seen)
			mu.Unlock()
			cfg := &rest.Config{Host: srv.URL}
			if tc.wrap {
				cfg = NoWriteRetries(cfg)
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := cs.CoreV1().Nodes().Patch(ctx, "a", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err == nil {
				t.Fatal("PATCH: no error from a 500")
			}
			if err := cs.CoreV1().Pods("ns").Delete(ctx, "p", metav1.DeleteOptions{}); err == nil {
				t.Fatal("DELETE: no error from a 500")
			}
			if _, err := cs.CoreV1().Nodes().Get(ctx, "a", metav1.GetOptions{}); err == nil {
				t.Fatal("GET: no error from a 500")
			}
			for _, m := range []string{http.MethodPatch, http.MethodDelete} {
				switch n := count(m); {
				case tc.writes == 1 && n != 1:
					t.Errorf("%s sent %d times, want once", m, n)
				case tc.writes == 0 && n < 2:
					t.Errorf("%s sent %d times; client-go alone retries it (the premise of this test)", m, n)
				}
			}
			if n := count(http.MethodGet); n < 2 {
				t.Errorf("GET sent %d times, want client-go's retries", n)
			}
		})
	}
}

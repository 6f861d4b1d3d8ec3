package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestNewClientSendsAWriteOnce: the client every service
// builds (NewClient, through RESTConfig) sends a write once against an API
// answering 500 with Retry-After. TestNoWriteRetries and the actuators'
// writeretry tests wrap a hand-made rest.Config with NoWriteRetries, so
// this one fails when RESTConfig stops calling it (found by review).
func TestNewClientSendsAWriteOnce(t *testing.T) {
	var patches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPatch {
			patches.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"ServerTimeout","code":500}`))
	}))
	defer srv.Close()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: %q}\nusers:\n- name: u\n  user: {token: t}\n"+
		"contexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n", srv.URL)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cs, _, err := NewClient(Options{Kubeconfig: p, QPS: 100, Burst: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(context.Background(), "a", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{}); err == nil {
		t.Fatal("PATCH: no error from a 500")
	}
	if n := patches.Load(); n != 1 {
		t.Fatalf("the services' client sent one PATCH %d times (client-go's Retry-After retries are not disabled)", n)
	}
}

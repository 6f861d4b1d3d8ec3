package harness

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 15 s); etcd
// keeps running with everything stored.
func (cp *ControlPlane) StopAPIServer(t testing.TB) {
	t.Helper()
	cp.apiserver.terminate(15 * time.Second)
	if !cp.apiserver.exited() {
		t.Fatal("kube-apiserver did not stop")
	}
}

// KillAPIServer SIGKILLs kube-apiserver (a crash: it stops answering at
// once, where SIGTERM drains open watches first); etcd keeps running.
func (cp *ControlPlane) KillAPIServer(t testing.TB) {
	t.Helper()
	cp.apiserver.signal(syscall.SIGKILL, 10*time.Second)
	if !cp.apiserver.exited() {
		t.Fatal("kube-apiserver did not die")
	}
}

// StartAPIServer starts kube-apiserver again on the same port, the same etcd
// and the same certificates, and waits for /readyz. Its log goes on in
// apiserver-<n>.log.
func (cp *ControlPlane) StartAPIServer(t testing.TB) {
	t.Helper()
	cp.apiRestarts++
	logFile := strings.TrimSuffix(cp.apiLog, ".log") + "-" + strconv.Itoa(cp.apiRestarts) + ".log"
	cp.apiserver = startLogged(t, logFile, cp.apiBin, cp.apiArgs...)
	cp.waitReady(t, 90*time.Second)
}

// EtcdRevision is etcd's current revision (the resourceVersion of the newest write).
func (cp *ControlPlane) EtcdRevision(t testing.TB) int64 {
	t.Helper()
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Any range answers with the store's header; key "\x00" matches nothing.
	cp.etcdCall(t, "/v3/kv/range", map[string]any{"key": "AA=="}, &out)
	rev, err := strconv.ParseInt(out.Header.Revision, 10, 64)
	if err != nil {
		t.Fatalf("etcd revision %q: %v", out.Header.Revision, err)
	}
	return rev
}

// CompactEtcd compacts etcd's history up to its current revision (physically:
// the call returns once the old revisions are gone), as the API server's own
// compactor does every 5 minutes. A watch from an older resourceVersion then
// gets 410 Gone. It returns the revision compacted to.
func (cp *ControlPlane) CompactEtcd(t testing.TB) int64 {
	t.Helper()
	rev := cp.EtcdRevision(t)
	cp.etcdCall(t, "/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil)
	return rev
}

// etcdCall posts to etcd's gRPC gateway (JSON over HTTP on the client URL).
func (cp *ControlPlane) etcdCall(t testing.TB, path string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(cp.EtcdURL+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("etcd %s: %v", path, err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("etcd %s: %s: %s", path, resp.Status, raw.String())
	}
	if out != nil {
		if err := json.Unmarshal(raw.Bytes(), out); err != nil {
			t.Fatalf("etcd %s: %v: %s", path, err, raw.String())
		}
	}
}

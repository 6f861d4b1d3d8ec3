//go:build bench

package bench

import (
	"net/http/httptest"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, url, agent string
		want               request
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p1", "opswire-cleanup/v1 (linux)", request{"opswire-cleanup", "GET", "pods"}},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500", "opswire-cordon/dev", request{"opswire-cordon", "LIST", "pods"}},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", "opswire-watcher/dev", request{"opswire-watcher", "WATCH", "pods"}},
		{"PATCH", "/api/v1/nodes/n1", "opswire-cordon/dev", request{"opswire-cordon", "PATCH", "nodes"}},
		{"PUT", "/api/v1/namespaces/ns/pods/p1/status", "x/1", request{"x", "UPDATE", "pods/status"}},
		{"DELETE", "/api/v1/namespaces/ns/pods/p1", "opswire-cleanup/dev", request{"opswire-cleanup", "DELETE", "pods"}},
		{"POST", "/api/v1/namespaces/ns/events", "opswire-cleanup/dev", request{"opswire-cleanup", "CREATE", "events"}},
		{"PUT", "/apis/coordination.k8s.io/v1/namespaces/default/leases/opswire-cordon", "opswire-cordon/dev", request{"opswire-cordon", "UPDATE", "leases"}},
		{"GET", "/api/v1/namespaces/default", "opswire-cordon/dev", request{"opswire-cordon", "GET", "namespaces"}},
		{"GET", "/apis", "opswire-cordon/dev", request{"opswire-cordon", "GET", "nonresource"}},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.url, nil)
		r.Header.Set("User-Agent", tt.agent)
		if got := classify(r); got != tt.want {
			t.Errorf("%s %s = %+v, want %+v", tt.method, tt.url, got, tt.want)
		}
	}
}

func TestCacheRead(t *testing.T) {
	tests := []struct {
		method, url string
		want        bool
	}{
		{"GET", "/api/v1/nodes/n1?resourceVersion=41", true},
		{"GET", "/api/v1/nodes/n1", false},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500&resourceVersion=9&resourceVersionMatch=NotOlderThan", true},
		{"GET", "/api/v1/nodes?resourceVersion=0", true},
		{"GET", "/api/v1/pods?limit=500&resourceVersion=9&resourceVersionMatch=Exact", false},
		{"GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1&limit=500&continue=abc", false},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", false},
		{"PATCH", "/api/v1/nodes/n1", false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.url, nil)
		if got := cacheRead(classify(r), r); got != tt.want {
			t.Errorf("%s %s: cache read %v, want %v", tt.method, tt.url, got, tt.want)
		}
	}
}

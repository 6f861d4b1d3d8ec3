package harness

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/opswire/opswire/shared/testport"
)

// TestControlPlaneTakesOtherPorts: a port taken between the pick and the
// bind (held here by the test: etcd's client port, etcd's peer port,
// kube-apiserver's port) gets etcd and kube-apiserver started again on
// other ports, and the control plane then serves.
func TestControlPlaneTakesOtherPorts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken int // which pick returns the held port: 0 etcd client, 1 etcd peer, 2 kube-apiserver
	}{{"etcd client port", 0}, {"etcd peer port", 1}, {"kube-apiserver port", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			held := l.Addr().(*net.TCPAddr).Port
			picks := 0
			cp := startControlPlane(t, func() int {
				picks++
				if picks-1 == tc.taken {
					return held
				}
				return testport.Must(t)
			})
			if picks != 6 {
				t.Fatalf("%d ports picked, want 6: the taken port was not replaced", picks)
			}
			for _, url := range []string{cp.URL, cp.EtcdURL} {
				if strings.HasSuffix(url, ":"+strconv.Itoa(held)) {
					t.Fatalf("serving on the taken port %d: %s", held, url)
				}
			}
			if _, err := cp.Client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
				t.Fatalf("control plane started on other ports does not serve: %v", err)
			}
		})
	}
}

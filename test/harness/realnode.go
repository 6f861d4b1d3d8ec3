package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/opswire/opswire/test/imagebuild"
)

// A real node is machine-wide: the scripts keep its state in fixed places and
// give it fixed addresses on a bridge of its own (10.88.0.1, 127.0.0.2), where
// the ports the other tests pick on 127.0.0.1 cannot collide with it.
const (
	realNodeState = "/var/lib/realnode"
	realNodeRun   = "/run/realnode"
	// RealNodeIP is the node's address: the API server, the kubelet and DNS
	// listen there, and pods reach the host there (a fake receiver, say).
	RealNodeIP = "10.88.0.1"
	// RealNodeName is the Node the kubelet registers.
	RealNodeName = "rn-node"
	// CoreDNSVersion is the CoreDNS hack/build-controlplane.sh builds.
	CoreDNSVersion = "v1.15.0"
)

// RealNode is a one-node Kubernetes cluster on this machine: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, a kubelet over
// containerd and runc with the bridge CNI, kube-proxy and CoreDNS, all of
// KubeVersion (hack/realnode, docs/real-node.md). Pods run for real, from
// images imported into containerd (nothing can be pulled here). Its API server
// is the embedded ControlPlane (admin token, ServiceAccountKubeconfig).
type RealNode struct {
	*ControlPlane
	scripts string
}

// StartRealNode brings the node up (Debian packages installed when missing,
// binaries from `make controlplane`), imports the pause and NATS images and
// the archives given, and waits for the node to be Ready. At the end of the
// test every process is stopped and every host change undone (down.sh).
// It needs root: it runs containerd, a bridge and iptables rules.
func StartRealNode(t testing.TB, archives ...string) *RealNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a real node needs root (containerd, a network bridge, iptables): run the e2e tests as root")
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rn := &RealNode{scripts: filepath.Join(root, "hack", "realnode")}
	if out, err := exec.Command(filepath.Join(rn.scripts, "install.sh")).CombinedOutput(); err != nil {
		t.Fatalf("hack/realnode/install.sh: %v\n%s", err, out)
	}
	dir := t.TempDir()
	binDir := realNodeBinaries(t, dir)
	images := append(toolImages(t, dir), archives...)

	// What an earlier run that was killed left behind goes first.
	rn.down(t, binDir)
	logDir := filepath.Dir(logPath(t, "realnode-up.log"))
	t.Cleanup(func() {
		for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "coredns", "containerd"} {
			if b, err := os.ReadFile(filepath.Join(realNodeRun, name+".log")); err == nil {
				_ = os.WriteFile(filepath.Join(logDir, "realnode-"+name+".log"), b, 0o644)
			}
		}
		rn.down(t, binDir)
	})

	token := randomHex(16)
	up := exec.Command(filepath.Join(rn.scripts, "up.sh"))
	up.Env = append(os.Environ(), "BIN="+binDir, "IMAGES="+strings.Join(images, " "), "ADMIN_TOKEN="+token)
	start := time.Now()
	out, err := runWithTimeout(up, 5*time.Minute)
	_ = os.WriteFile(filepath.Join(logDir, "realnode-up.log"), out, 0o644)
	if err != nil {
		t.Fatalf("hack/realnode/up.sh: %v\n%s", err, tailString(string(out), 30))
	}
	t.Logf("real node %s Ready in %s (%d images imported)", RealNodeName, time.Since(start).Round(100*time.Millisecond), len(images))

	cp := &ControlPlane{URL: "https://" + RealNodeIP + ":6443", Token: token, Dir: dir}
	cp.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.URL, token); err != nil {
		t.Fatal(err)
	}
	cp.Config = &rest.Config{Host: cp.URL, BearerToken: token, QPS: 500, Burst: 1000,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	cp.Client = kubernetes.NewForConfigOrDie(cp.Config)
	rn.ControlPlane = cp
	return rn
}

// Kubectl runs the host's kubectl against the node as admin and returns its
// output, failing the test on an error.
func (rn *RealNode) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := rn.KubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// KubectlErr is Kubectl that returns the error.
func (rn *RealNode) KubectlErr(args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", rn.Kubeconfig}, args...)...)
	out, err := runWithTimeout(cmd, 3*time.Minute)
	return string(out), err
}

// ImportImages loads OCI archives into the node's containerd (the k8s.io
// namespace the kubelet uses), under the names they carry.
func (rn *RealNode) ImportImages(t testing.TB, archives ...string) {
	t.Helper()
	for _, a := range archives {
		out, err := exec.Command("ctr", "-a", filepath.Join(realNodeRun, "containerd.sock"), "-n", "k8s.io",
			"images", "import", a).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", a, err, out)
		}
	}
}

// HostPathPV creates a PersistentVolume on a directory of the node owned by
// uid (no provisioner here; fsGroup does not apply to hostPath), for a
// StatefulSet's claim of up to size.
func (rn *RealNode) HostPathPV(t testing.TB, name, size string, uid int) {
	t.Helper()
	path := filepath.Join(realNodeState, "pv", name)
	if err := os.MkdirAll(path, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	dirType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &dirType}},
		},
	}
	if _, err := rn.Client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PersistentVolume %s: %v", name, err)
	}
}

func (rn *RealNode) down(t testing.TB, binDir string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(rn.scripts, "down.sh"))
	cmd.Env = append(os.Environ(), "BIN="+binDir, "PURGE=1")
	if out, err := runWithTimeout(cmd, 3*time.Minute); err != nil {
		t.Errorf("hack/realnode/down.sh: %v\n%s", err, out)
	}
}

// realNodeBinaries links the cached binaries under the names up.sh runs.
func realNodeBinaries(t testing.TB, dir string) string {
	t.Helper()
	cache, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"etcd":    filepath.Join(cache, "etcd-"+EtcdVersion),
		"coredns": filepath.Join(cache, "coredns-"+CoreDNSVersion),
	}
	for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		links[c] = KubeBin(t, c)
	}
	for name, target := range links {
		if _, err := os.Stat(target); err != nil {
			t.Fatalf("%s is missing: run `make controlplane` (hack/build-controlplane.sh) first", target)
		}
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// toolImages writes the images the node needs and cannot pull: the pod
// sandbox, and NATS under the name deploy/ gives it (a static nats-server of
// test/go.mod's version with the wget its probes exec).
func toolImages(t testing.TB, dir string) []string {
	t.Helper()
	pause := goBuildStatic(t, dir, "./cmd/realnode-pause")
	wget := goBuildStatic(t, dir, "./cmd/realnode-wget")
	nats := goBuildStatic(t, dir, "github.com/nats-io/nats-server/v2")
	natsVersion, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
	if err != nil {
		t.Fatalf("nats-server version: %v", err)
	}
	images := []struct {
		archive string
		image   imagebuild.ToolImage
	}{
		{"pause.oci.tar", imagebuild.ToolImage{Name: "registry.k8s.io/pause:3.10",
			Files: map[string]string{"/pause": pause}, Entrypoint: []string{"/pause"}}},
		{"nats.oci.tar", imagebuild.ToolImage{
			Name:       "docker.io/library/nats:" + strings.TrimPrefix(strings.TrimSpace(string(natsVersion)), "v") + "-alpine",
			Files:      map[string]string{"/nats-server": nats, "/bin/wget": wget},
			Links:      map[string]string{"/usr/local/bin/nats-server": "/nats-server"},
			Entrypoint: []string{"/nats-server"}, Env: []string{"PATH=/usr/local/bin:/bin"}}},
	}
	var out []string
	for _, im := range images {
		path := filepath.Join(dir, im.archive)
		if err := imagebuild.WriteToolImage(path, im.image); err != nil {
			t.Fatal(err)
		}
		out = append(out, path)
	}
	return out
}

// goBuildStatic builds a package of the test module (or one it requires) as a
// static binary for a scratch image.
func goBuildStatic(t testing.TB, dir, pkg string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(strings.TrimSuffix(pkg, "/v2")))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = filepath.Join(root, "test")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// runWithTimeout runs cmd, killing it after d.
func runWithTimeout(cmd *exec.Cmd, d time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	c.Env, c.Dir = cmd.Env, cmd.Dir
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s: timed out after %v", filepath.Base(cmd.Path), d)
	}
	return out, err
}

func tailString(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

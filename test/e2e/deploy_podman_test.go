package e2e

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/opswire/opswire/shared/testport"
	"github.com/opswire/opswire/test/harness"
	"github.com/opswire/opswire/test/imagebuild"
)

// podmanRuntime and podmanRunFlags are what this machine's podman needs (see
// docs/deploy.md, "Images"): crun fails on hybrid cgroups, and podman's
// default ulimits are above the machine's hard limits.
const podmanRuntime = "/usr/sbin/runc"

var podmanRunFlags = []string{"--runtime", podmanRuntime, "--network=host", "--read-only",
	"--cap-drop=ALL", "--security-opt=no-new-privileges",
	"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// TestDeployImagesPodman builds the watcher and cordon images with `make
// images` (linux/amd64 only, to keep it short), checks what is in them
// (platform, user, entrypoint, OCI annotations, one layer with the binary, CA
// bundle and passwd), installs podman if it is missing, loads them into podman and runs both containers (host network, read-only
// root, uid 65532 from the image or --user, no capabilities) against the harness's real API server and
// NATS: a node that goes over maxPods is cordoned by the cordon container.
func TestDeployImagesPodman(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	imageDir := filepath.Join(tmp, "images")

	start := time.Now()
	mk := exec.Command("make", "--no-print-directory", "-C", root, "images", "SERVICES=watcher cordon",
		"IMAGE_PLATFORMS=linux/amd64", "IMAGE_DIR="+imageDir, "IMAGE_BIN="+filepath.Join(tmp, "bin"), "VERSION=e2e",
		"REVISION=0123456789abcdef0123456789abcdef01234567")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make images: %v\n%s", err, out)
	}
	t.Logf("make images (watcher, cordon; linux/amd64): %s", time.Since(start).Round(time.Millisecond))

	for _, svc := range []string{"watcher", "cordon"} {
		checkImageArchive(t, filepath.Join(imageDir, imagebuild.ArchiveName(svc, "linux/amd64")), svc)
	}

	podman := ensurePodman(t) // after the build: the archives are checked even where podman cannot run
	images := map[string]string{}
	for _, svc := range []string{"watcher", "cordon"} {
		archive := filepath.Join(imageDir, imagebuild.ArchiveName(svc, "linux/amd64"))
		loadStart := time.Now()
		out, err := exec.Command(podman, "load", "-i", archive).CombinedOutput()
		if err != nil {
			t.Fatalf("podman load %s: %v\n%s", archive, err, out)
		}
		// The same name as the manifests use (opswire/opswire-<service>, i.e. docker.io/...).
		ref := "docker.io/opswire/opswire-" + svc + ":e2e"
		if !strings.Contains(string(out), "Loaded image: "+ref) {
			t.Fatalf("podman load named the image otherwise than %s:\n%s", ref, out)
		}
		t.Logf("podman load %s: %s", ref, time.Since(loadStart).Round(time.Millisecond))
		images[svc] = ref
		t.Cleanup(func() { _ = exec.Command(podman, "rmi", "-f", ref).Run() })
	}

	cp := harness.StartControlPlane(t)
	n := harness.StartNATS(t)
	c := cp.Client
	harness.CreateNode(t, c, harness.Node("img-a", nil))
	harness.CreateNode(t, c, harness.Node("img-b", nil))
	cfg := harness.WriteConfig(t, cordonConfig("1m", "  maxCordonedPercent: 100\n"))

	runStart := time.Now()
	// The watcher runs as the image's own user (its config says 65532:65532),
	// the cordon actor with --user as Kubernetes' runAsUser would set it; the
	// process's ids are checked on the host either way.
	watcher := runContainer(t, podman, images["watcher"], "w1", cfg, cp.Kubeconfig, n.URL)
	watcher.waitReady(t, 90*time.Second)
	waitMirrored(t, cp, n)
	cordon := runContainer(t, podman, images["cordon"], "c1", cfg, cordonRBAC(t, cp, "default"), n.URL, "--user", "65532:65532")
	cordon.waitReady(t, 90*time.Second)
	t.Logf("containers ready: %s", time.Since(runStart).Round(time.Millisecond))
	for _, ct := range []*container{watcher, cordon} {
		ct.checkHardened(t)
	}

	actStart := time.Now()
	cordonFill(t, c, "img-a", 0, 6) // maxPods is 5
	harness.Eventually(t, 30*time.Second, "img-a cordoned by the cordon container", func() bool {
		a := harness.GetNode(t, c, "img-a")
		return a.Spec.Unschedulable && cordonMarked(a)
	})
	t.Logf("6 pods created -> img-a cordoned: %s", time.Since(actStart).Round(time.Millisecond))
	if b := harness.GetNode(t, c, "img-b"); b.Spec.Unschedulable || cordonMarked(b) {
		t.Fatal("img-b (no pods) cordoned")
	}
	if v := watcher.metric(t, "opswire_watcher_published_total"); v <= 0 {
		t.Errorf("watcher container's /metrics: opswire_watcher_published_total = %v", v)
	}
}

// ensurePodman finds podman and runc, installing Debian's packages when it
// runs as root (CI). It skips only where it cannot install them (not root, no
// apt-get); as root on Debian a failed install fails the test, so CI cannot go
// green without the images having run.
func ensurePodman(t *testing.T) string {
	t.Helper()
	have := func() bool {
		_, err1 := exec.LookPath("podman")
		_, err2 := os.Stat(podmanRuntime)
		return err1 == nil && err2 == nil
	}
	if !have() {
		if os.Geteuid() != 0 {
			t.Skip("podman and runc are not installed and the test is not root: apt-get install -y podman runc")
		}
		if _, err := exec.LookPath("apt-get"); err != nil {
			t.Skip("podman and runc are not installed and there is no apt-get to install them")
		}
		start := time.Now()
		install := func() ([]byte, error) {
			cmd := exec.Command("apt-get", "install", "-y", "podman", "runc")
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			return cmd.CombinedOutput()
		}
		out, err := install()
		if err != nil {
			if u, uerr := exec.Command("apt-get", "update").CombinedOutput(); uerr != nil {
				t.Fatalf("podman cannot be installed (apt-get update: %v):\n%s", uerr, tailLines(string(u), 20))
			}
			out, err = install()
		}
		if err != nil || !have() {
			t.Fatalf("podman cannot be installed (apt-get install podman runc: %v):\n%s", err, tailLines(string(out), 20))
		}
		t.Logf("installed podman and runc: %s", time.Since(start).Round(time.Second))
	}
	p, _ := exec.LookPath("podman")
	return p
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// checkImageArchive reads an archive back and checks its platform, user,
// entrypoint, annotations and files.
func checkImageArchive(t *testing.T, archive, svc string) {
	t.Helper()
	img, p, err := imagebuild.ReadArchive(archive, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if p.OS != "linux" || p.Architecture != "amd64" {
		t.Errorf("%s: platform %v", archive, p)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/opswire" {
		t.Errorf("%s: user %q entrypoint %v", archive, cf.Config.User, cf.Config.Entrypoint)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source":   "https://github.com/opswire/opswire",
		"org.opencontainers.image.version":  "e2e",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.title":    "opswire-" + svc,
	} {
		if m.Annotations[k] != want || cf.Config.Labels[k] != want {
			t.Errorf("%s: %s = %q (manifest) %q (label), want %q", archive, k, m.Annotations[k], cf.Config.Labels[k], want)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers (%v), want 1 on scratch", archive, len(layers), err)
	}
	files := layerFiles(t, layers[0])
	for name, mode := range map[string]int64{"opswire": 0o755, "etc/ssl/certs/ca-certificates.crt": 0o644, "etc/passwd": 0o644} {
		if h, ok := files[name]; !ok || h.Mode != mode || h.Uid != 0 {
			t.Errorf("%s: %s missing or not mode %o root-owned: %+v", archive, name, mode, h)
		}
	}
}

func layerFiles(t *testing.T, l v1.Layer) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = h
	}
}

// container is one service running from its image under podman.
type container struct {
	podman, name, url string
}

// runContainer starts a service image with the production hardening, the
// config and kubeconfig bind-mounted read-only (copied world-readable: the
// container's uid 65532 reads them), listening on a free loopback port.
func runContainer(t *testing.T, podman, image, id, cfg, kubeconfig, natsURL string, flags ...string) *container {
	t.Helper()
	dir := t.TempDir()
	mounts := map[string]string{cfg: "/etc/opswire/config.yml", kubeconfig: "/kube/config"}
	var vols []string
	for src, dst := range mounts {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(dir, filepath.Base(dst))
		if err := os.WriteFile(cp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(cp, 0o644); err != nil {
			t.Fatal(err)
		}
		vols = append(vols, "-v", cp+":"+dst+":ro")
	}
	port := testport.Must(t)
	ct := &container{podman: podman, name: fmt.Sprintf("opswire-e2e-%s-%d", id, time.Now().UnixNano()), url: "http://127.0.0.1:" + strconv.Itoa(port)}
	args := append([]string{"run", "-d", "--name", ct.name}, podmanRunFlags...)
	args = append(args, flags...)
	args = append(args, vols...)
	args = append(args, image, "--config", "/etc/opswire/config.yml", "--kubeconfig", "/kube/config", "--nats-url", natsURL,
		"--listen", "127.0.0.1:"+strconv.Itoa(port), "--id", id, "--log-format", "json", "--log-level", "debug")
	if out, err := exec.Command(podman, args...).CombinedOutput(); err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() {
		logs, _ := exec.Command(podman, "logs", ct.name).CombinedOutput()
		if t.Failed() {
			t.Logf("%s logs:\n%s", ct.name, tailLines(string(logs), 60))
		}
		_ = exec.Command(podman, "rm", "-f", "-t", "10", ct.name).Run()
	})
	return ct
}

func (ct *container) inspect(t *testing.T, format string) string {
	t.Helper()
	out, err := exec.Command(ct.podman, "inspect", "-f", format, ct.name).CombinedOutput()
	if err != nil {
		t.Fatalf("podman inspect %s: %v\n%s", ct.name, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (ct *container) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	harness.Eventually(t, timeout, ct.name+" /readyz", func() bool {
		if st := ct.inspect(t, "{{.State.Status}}"); st == "exited" || st == "stopped" {
			logs, _ := exec.Command(ct.podman, "logs", ct.name).CombinedOutput()
			t.Fatalf("%s %s:\n%s", ct.name, st, tailLines(string(logs), 40))
		}
		code, _ := httpGet(ct.url + "/readyz")
		return code == 200
	})
}

// checkHardened checks the running container: read-only root, and the
// service process itself runs as uid and gid 65532 on the host's kernel.
func (ct *container) checkHardened(t *testing.T) {
	t.Helper()
	if ro := ct.inspect(t, "{{.HostConfig.ReadonlyRootfs}}"); ro != "true" {
		t.Errorf("%s: ReadonlyRootfs %s", ct.name, ro)
	}
	pid := ct.inspect(t, "{{.State.Pid}}")
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			for _, id := range f[1:] {
				if id != "65532" {
					t.Errorf("%s: %s (want 65532 throughout)", ct.name, line)
					break
				}
			}
		}
		if strings.HasPrefix(line, "CapEff:") && strings.TrimSpace(strings.TrimPrefix(line, "CapEff:")) != "0000000000000000" {
			t.Errorf("%s: %s", ct.name, line)
		}
	}
}

func (ct *container) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	_, body := httpGet(ct.url + "/metrics")
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

func httpGet(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

package e2e

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployCompose parses docker-compose.yaml and checks that it runs NATS
// and the five services from this repository's Dockerfile, and that every
// file it references exists (the kubeconfig is the user's own).
func TestDeployCompose(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image string `json:"image"`
			Build *struct {
				Context    string            `json:"context"`
				Dockerfile string            `json:"dockerfile"`
				Args       map[string]string `json:"args"`
			} `json:"build"`
			Environment map[string]string `json:"environment"`
			Volumes     []string          `json:"volumes"`
			Ports       []string          `json:"ports"`
			ReadOnly    bool              `json:"read_only"`
			CapDrop     []string          `json:"cap_drop"`
			User        string            `json:"user"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal([]byte(mustRead(t, filepath.Join(root, "docker-compose.yaml"))), &doc); err != nil {
		t.Fatalf("docker-compose.yaml does not parse: %v", err)
	}
	if s, ok := doc.Services["nats"]; !ok || !strings.HasPrefix(s.Image, "nats:") || !strings.Contains(strings.Join(s.Ports, " "), "4222") {
		t.Errorf("nats service missing or without JetStream client port: %+v", s)
	}
	ports := map[string]string{}
	for _, svc := range deployServices {
		t.Run(svc, func(t *testing.T) {
			s, ok := doc.Services[svc]
			if !ok {
				t.Fatal("missing")
			}
			if s.Build == nil || s.Build.Args["SERVICE"] != svc || s.Image != "opswire/opswire-"+svc+":dev" {
				t.Errorf("build %+v image %q; want the Dockerfile with SERVICE=%s, image opswire/opswire-%s:dev", s.Build, s.Image, svc, svc)
			} else if _, err := os.Stat(filepath.Join(root, s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("build file: %v", err)
			}
			if !s.ReadOnly || len(s.CapDrop) != 1 || s.CapDrop[0] != "ALL" || s.User == "" {
				t.Errorf("want read_only, cap_drop ALL and a non-root user; got %v %v %q", s.ReadOnly, s.CapDrop, s.User)
			}
			if s.Environment["OPSWIRE_NATS_URL"] != "nats://nats:4222" || s.Environment["OPSWIRE_CONFIG"] != "/etc/opswire/config.yml" {
				t.Errorf("environment %v", s.Environment)
			}
			actor := svc == "cordon" || svc == "cleanup"
			if actor != (s.Environment["OPSWIRE_DRY_RUN"] != "") {
				t.Errorf("OPSWIRE_DRY_RUN = %q: actors that write start in dry-run, others have no such flag", s.Environment["OPSWIRE_DRY_RUN"])
			}
			wantKube := svc != "notifier"
			var hasKube bool
			for _, v := range s.Volumes {
				host, target := splitVolume(v)
				if target == "/kube/config" {
					hasKube = true
					continue // the user's kubeconfig
				}
				if _, err := os.Stat(filepath.Join(root, host)); err != nil {
					t.Errorf("volume %s: %v", v, err)
				}
				if target == "/etc/opswire/config.yml" {
					if _, err := config.Load(filepath.Join(root, host)); err != nil {
						t.Errorf("%s does not load: %v", host, err)
					}
				}
			}
			if hasKube != wantKube || (wantKube && s.Environment["OPSWIRE_KUBECONFIG"] != "/kube/config") {
				t.Errorf("kubeconfig mounted %v, want %v", hasKube, wantKube)
			}
			for _, p := range s.Ports {
				if other, dup := ports[p]; dup {
					t.Errorf("port %s also used by %s", p, other)
				}
				ports[p] = svc
			}
		})
	}
}

// TestDeployDockerfile re-enacts the Dockerfile's build stage without a
// container engine: the build context the .dockerignore leaves (shared/ and
// services/<service>/ without tests), GOWORK=off, the same go build flags.
// Each binary must build and print its version; the runtime stage must be a
// non-root scratch image.
func TestDeployDockerfile(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	df := mustRead(t, filepath.Join(root, "Dockerfile"))
	for _, want := range []string{"FROM scratch", "USER 65532:65532", "CGO_ENABLED=0", "GOWORK=off",
		`ENTRYPOINT ["/opswire"]`, "COPY --from=build /etc/ssl/certs/ca-certificates.crt"} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	m := regexp.MustCompile(`go build (.*) -o /out/opswire \.`).FindStringSubmatch(strings.ReplaceAll(df, "\\\n", " "))
	if m == nil {
		t.Fatal("Dockerfile: no go build line")
	}
	flags := strings.Fields(strings.ReplaceAll(m[1], "${VERSION}", "e2e"))
	args := []string{"build"}
	for i := 0; i < len(flags); i++ { // re-join the quoted -ldflags value
		if flags[i] == "-ldflags" {
			j := i + 1
			for ; j < len(flags) && !strings.HasSuffix(flags[j], `"`); j++ {
			}
			args = append(args, "-ldflags", strings.Trim(strings.Join(flags[i+1:j+1], " "), `"`))
			i = j
			continue
		}
		args = append(args, flags[i])
	}
	ctx := t.TempDir()
	copyTree(t, filepath.Join(root, "shared"), filepath.Join(ctx, "shared"))
	for _, svc := range deployServices {
		t.Run(svc, func(t *testing.T) {
			dir := filepath.Join(ctx, "services", svc)
			copyTree(t, filepath.Join(root, "services", svc), dir)
			out := filepath.Join(t.TempDir(), "opswire")
			cmd := exec.Command("go", append(args, "-o", out, ".")...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
			}
			v, err := exec.Command(out, "--version").CombinedOutput()
			if err != nil || strings.TrimSpace(string(v)) != "opswire-"+svc+" e2e" {
				t.Fatalf("--version: %q %v", v, err)
			}
		})
	}
}

// splitVolume splits a compose bind mount "host:target[:ro]", where host may
// be a ${VAR:-default} expression containing ':'.
func splitVolume(v string) (host, target string) {
	rest := v
	if strings.HasPrefix(v, "${") {
		end := strings.Index(v, "}")
		host, rest = v[:end+1], v[end+1:]
	} else {
		host, rest, _ = strings.Cut(v, ":")
		rest = ":" + rest
	}
	return host, strings.TrimSuffix(strings.TrimPrefix(rest, ":"), ":ro")
}

// copyTree copies a directory as the .dockerignore filters it: no tests, no testdata.
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if info.IsDir() {
			if info.Name() == "testdata" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		dst, err := os.Create(filepath.Join(to, rel))
		if err != nil {
			return err
		}
		defer dst.Close()
		_, err = io.Copy(dst, src)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

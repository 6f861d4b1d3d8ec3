package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/shared/config"
	"github.com/opswire/opswire/test/harness"
)

// TestDeployCompose parses docker-compose.yaml and checks that it runs NATS
// and the five services from the images `make images` writes (loaded with
// docker load; compose builds nothing), hardened, and that every file it
// references exists (the kubeconfig is the user's own).
func TestDeployCompose(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `json:"image"`
			Build       any               `json:"build"`
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
	for _, svc := range harness.Services {
		t.Run(svc, func(t *testing.T) {
			s, ok := doc.Services[svc]
			if !ok {
				t.Fatal("missing")
			}
			if s.Build != nil || s.Image != "opswire/opswire-"+svc+":${OPSWIRE_TAG:-dev}" {
				t.Errorf("build %v image %q; want no build and the image opswire/opswire-%s:${OPSWIRE_TAG:-dev} of make images", s.Build, s.Image, svc)
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

// TestDeployImagesRegistry renders the kustomization docs/deploy.md shows for
// images pushed with make push: an overlay of deploy/overlays/production with
// an images: block. Every opswire container must then name the registry and
// tag, and NATS keep its own image.
func TestDeployImagesRegistry(t *testing.T) {
	dir := t.TempDir()
	prod, err := filepath.Rel(dir, deployPath(t, "overlays", "production"))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + prod + "\nimages:\n"
	for _, svc := range harness.Services {
		k += "- {name: opswire/opswire-" + svc + ", newName: registry.example.com/acme/opswire-" + svc + ", newTag: v1.2.3}\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, o := range harness.KustomizeBuild(t, dir) {
		if o.GetKind() != "Deployment" && o.GetKind() != "StatefulSet" {
			continue
		}
		cs, _, _ := unstructuredContainers(o)
		for _, c := range cs {
			img, _ := c["image"].(string)
			if strings.Contains(img, "opswire-") {
				svc := strings.TrimSuffix(strings.TrimPrefix(img, "registry.example.com/acme/opswire-"), ":v1.2.3")
				if img != "registry.example.com/acme/opswire-"+svc+":v1.2.3" {
					t.Errorf("%s: image %q not rewritten", o.GetName(), img)
				}
				seen[svc] = true
			} else if !strings.HasPrefix(img, "nats:") {
				t.Errorf("%s: unexpected image %q", o.GetName(), img)
			}
		}
	}
	for _, svc := range harness.Services {
		if !seen[svc] {
			t.Errorf("no container of %s rendered", svc)
		}
	}
}

func unstructuredContainers(o *unstructured.Unstructured) ([]map[string]any, bool, error) {
	list, ok, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	var out []map[string]any
	for _, c := range list {
		if m, isMap := c.(map[string]any); isMap {
			out = append(out, m)
		}
	}
	return out, ok, err
}

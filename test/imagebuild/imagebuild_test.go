package imagebuild

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestBuildAndPush builds two platform archives of one service from a stand-in
// binary, checks that a second build gives the same bytes, and pushes them to
// an in-process registry as one index with both platforms and the annotations.
func TestBuildAndPush(t *testing.T) {
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if err := os.MkdirAll(filepath.Join(dir, "bin", "linux_"+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bin", "linux_"+arch, "opswire-cordon"), []byte("binary "+arch), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{BinDir: filepath.Join(dir, "bin"), OutDir: filepath.Join(dir, "out"), Services: []string{"cordon"},
		Platforms: []string{"linux/amd64", "linux/arm64"}, CACerts: ca, Repo: "opswire/opswire-", Version: "v1.2.3",
		Revision: "abc", Source: "https://example.com/opswire", Created: time.Unix(1700000000, 0).UTC()}
	paths, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 2 {
		t.Fatalf("archives %v", paths)
	}
	first, _ := os.ReadFile(paths[0])
	if _, err := Build(o); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(paths[0]); string(again) != string(first) {
		t.Error("a second build of the same inputs gave a different archive")
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	refs, err := Push(PushOptions{Dir: o.OutDir, Services: []string{"cordon"}, Registry: host + "/acme", Tag: "v1.2.3", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || !strings.HasPrefix(refs[0], host+"/acme/opswire-cordon:v1.2.3@sha256:") {
		t.Fatalf("pushed %v", refs)
	}
	ref, _ := name.NewTag(host+"/acme/opswire-cordon:v1.2.3", name.Insecure)
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var plats []string
	for _, d := range m.Manifests {
		plats = append(plats, d.Platform.String())
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Config.User != "65532:65532" || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: user %q arch %q", d.Platform, cf.Config.User, cf.Architecture)
		}
	}
	if strings.Join(plats, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("platforms %v", plats)
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": "v1.2.3", "org.opencontainers.image.revision": "abc",
		"org.opencontainers.image.source": "https://example.com/opswire", "org.opencontainers.image.created": "2023-11-14T22:13:20Z"} {
		if m.Annotations[k] != want {
			t.Errorf("index annotation %s = %q, want %q", k, m.Annotations[k], want)
		}
	}
}

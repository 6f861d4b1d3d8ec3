package imagebuild

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ToolImage is a one-layer scratch image of static executables that are not
// opswire's: what the test node runs in place of images it cannot pull (the
// pod sandbox, nats-server with the wget its probes exec).
type ToolImage struct {
	Name       string            // full, normalized name, e.g. docker.io/library/nats:2.15.3-alpine
	Files      map[string]string // path in the image -> executable on this host
	Links      map[string]string // path in the image -> symlink target
	Entrypoint []string
	Env        []string
}

// WriteToolImage writes ti for linux/amd64 as an OCI archive that
// `ctr images import` names ti.Name.
func WriteToolImage(archive string, ti ToolImage) error {
	var files []file
	dirs := map[string]bool{}
	addDirs := func(p string) {
		var parents []string
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			if d := parents[i]; !dirs[d] {
				dirs[d] = true
				files = append(files, file{name: d[1:] + "/", mode: 0o755, dir: true})
			}
		}
	}
	for _, dst := range sortedKeys(ti.Files) {
		data, err := os.ReadFile(ti.Files[dst])
		if err != nil {
			return err
		}
		addDirs(dst)
		files = append(files, file{name: dst[1:], mode: 0o755, data: data})
	}
	for _, dst := range sortedKeys(ti.Links) {
		addDirs(dst)
		files = append(files, file{name: dst[1:], mode: 0o777, link: ti.Links[dst]})
	}
	layerTar, err := tarFiles(files, time.Time{})
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint, cf.Config.Env = ti.Entrypoint, ti.Env
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := writeNamedArchive(archive, img, v1.Platform{OS: "linux", Architecture: "amd64"}, ti.Name, ti.Name); err != nil {
		return fmt.Errorf("%s: %w", ti.Name, err)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

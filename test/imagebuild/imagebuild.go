// Package imagebuild writes opswire's container images without a container
// engine or a registry: each image is one layer on an empty (scratch) base
// holding the static service binary, the build host's CA bundle and a passwd
// entry for the non-root user 65532, written as an OCI archive (a tar of an
// OCI image layout) per service and platform. Push reads those archives back
// and pushes one multi-platform index per service. It is the library behind
// `make images` and `make push` (command opswire-image).
package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// UID is the user (and group) every image runs as.
const UID = 65532

// Options describe one build.
type Options struct {
	BinDir    string   // holds <os>_<arch>/opswire-<service>
	OutDir    string   // the archives are written here
	Services  []string // e.g. watcher, cordon
	Platforms []string // e.g. linux/amd64, linux/arm64
	CACerts   string   // CA bundle copied to /etc/ssl/certs/ca-certificates.crt
	Repo      string   // local repository prefix, e.g. opswire/opswire-
	Version   string   // image tag and org.opencontainers.image.version
	Revision  string   // org.opencontainers.image.revision (a commit)
	Source    string   // org.opencontainers.image.source (a URL)
	Created   time.Time
}

// ArchiveName is the file name of one image archive.
func ArchiveName(service, platform string) string {
	return "opswire-" + service + "_" + strings.ReplaceAll(platform, "/", "-") + ".oci.tar"
}

// Build writes one archive per service and platform and returns their paths.
func Build(o Options) ([]string, error) {
	ca, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("CA bundle: %w", err)
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	var out []string
	for _, svc := range o.Services {
		for _, plat := range o.Platforms {
			p, err := v1.ParsePlatform(plat)
			if err != nil {
				return nil, err
			}
			bin := filepath.Join(o.BinDir, p.OS+"_"+p.Architecture, "opswire-"+svc)
			img, err := Image(o, svc, *p, bin, ca)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", svc, plat, err)
			}
			path := filepath.Join(o.OutDir, ArchiveName(svc, plat))
			ref := o.Repo + svc + ":" + o.Version
			if err := writeArchive(path, img, *p, ref); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			out = append(out, path)
		}
	}
	return out, nil
}

// Annotations are the OCI annotations (and config labels) of a service's image.
func Annotations(o Options, service string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "opswire-" + service,
		"org.opencontainers.image.description": "opswire " + service + ": Kubernetes cluster operations over NATS",
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// Image assembles one service image for one platform from its binary.
func Image(o Options, service string, p v1.Platform, bin string, ca []byte) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", UID))},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/:/sbin/nologin\n", UID, UID))},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca},
		{name: "opswire", mode: 0o755, data: exe},
	}
	layerTar, err := tarFiles(files, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: o.Created},
			CreatedBy: "opswire-image: /opswire (CGO_ENABLED=0, -tags timetzdata), CA bundle, nonroot user",
			Comment:   "scratch base",
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	ann := Annotations(o, service)
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: o.Created}
	cf.Author = "opswire"
	cf.Config.Entrypoint = []string{"/opswire"}
	cf.Config.Cmd = nil
	cf.Config.User = fmt.Sprintf("%d:%d", UID, UID)
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	cf.Config.Labels = ann
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, ann).(v1.Image), nil
}

type file struct {
	name string
	mode int64
	dir  bool
	link string // a symlink to this target
	data []byte
}

func tarFiles(files []file, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: mtime, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
		switch {
		case f.dir:
			h.Typeflag, h.Size = tar.TypeDir, 0
		case f.link != "":
			h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, f.link
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img as an OCI image layout (index.json naming it ref)
// and tars that layout into path.
func writeArchive(path string, img v1.Image, p v1.Platform, ref string) error {
	return writeNamedArchive(path, img, p, ref, "docker.io/"+ref)
}

// writeNamedArchive is writeArchive with the name containerd gives the image
// (a full, normalized name) set apart from the short one podman uses.
func writeNamedArchive(path string, img v1.Image, p v1.Platform, ref, containerdName string) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img, layout.WithPlatform(p),
		layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": ref,            // podman load names the image after it
			"io.containerd.image.name":          containerdName, // docker load and ctr import (containerd) do
		})); err != nil {
		return err
	}
	return tarDir(path, dir)
}

// tarDir writes the files under dir into a tar at path, sorted, with zero
// times, so the same inputs give the same archive.
func tarDir(path, dir string) error {
	var names []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			names = append(names, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, p := range names {
		info, err := os.Stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Size: info.Size()}
		if info.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.IsDir() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadArchive reads the single image of an archive written by Build,
// unpacking it under scratch (blobs are read lazily: keep scratch until the
// image has been used).
func ReadArchive(path, scratch string) (v1.Image, *v1.Platform, error) {
	dir, err := os.MkdirTemp(scratch, "layout-")
	if err != nil {
		return nil, nil, err
	}
	if err := untar(path, dir); err != nil {
		return nil, nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, nil, fmt.Errorf("%s: %d manifests, want 1", path, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	return img, &v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}, nil
}

func untar(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) {
			return fmt.Errorf("%s: entry %q outside the archive", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.Create(target)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			out.Close()
			if err != nil {
				return err
			}
		}
	}
}

// PushOptions describe a push.
type PushOptions struct {
	Dir      string   // the archives of Build
	Services []string // services to push
	Registry string   // e.g. ghcr.io/acme (images go to <registry>/opswire-<service>)
	Tag      string
	Insecure bool // plain HTTP registry
	Options  []remote.Option
}

// Push pushes, per service, one index of every platform archive found in Dir
// to <registry>/opswire-<service>:<tag> and returns the pushed references
// with their digests. Credentials come from the docker config
// (~/.docker/config.json, $DOCKER_CONFIG) like crane's.
func Push(o PushOptions) ([]string, error) {
	scratch, err := os.MkdirTemp("", "opswire-push-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	var pushed []string
	for _, svc := range o.Services {
		matches, err := filepath.Glob(filepath.Join(o.Dir, "opswire-"+svc+"_*.oci.tar"))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("no image archives for %s in %s (run make images)", svc, o.Dir)
		}
		sort.Strings(matches)
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		var ann map[string]string
		for _, m := range matches {
			img, p, err := ReadArchive(m, scratch)
			if err != nil {
				return nil, err
			}
			if mf, err := img.Manifest(); err == nil && ann == nil {
				ann = mf.Annotations
			}
			idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: p}})
		}
		idx = mutate.Annotations(idx, ann).(v1.ImageIndex)
		var nopts []name.Option
		if o.Insecure {
			nopts = append(nopts, name.Insecure)
		}
		ref, err := name.NewTag(strings.TrimSuffix(o.Registry, "/")+"/opswire-"+svc+":"+o.Tag, nopts...)
		if err != nil {
			return nil, err
		}
		opts := append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}, o.Options...)
		if err := remote.WriteIndex(ref, idx, opts...); err != nil {
			return nil, fmt.Errorf("push %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return nil, err
		}
		pushed = append(pushed, ref.String()+"@"+d.String())
	}
	return pushed, nil
}

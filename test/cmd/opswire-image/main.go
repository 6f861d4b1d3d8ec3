// Command opswire-image is `make images` and `make push`: it builds the
// services' OCI images from static binaries without a container engine or a
// registry, and pushes them as multi-platform indexes (see package imagebuild).
//
//	opswire-image build --bin bin --out bin/images --version v1.2.3 --revision <commit>
//	opswire-image push --dir bin/images --registry ghcr.io/acme --tag v1.2.3
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/opswire/opswire/test/imagebuild"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = build(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "opswire-image:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: opswire-image build|push [flags] (-h for the flags)")
	os.Exit(2)
}

const allServices = "watcher cordon cleanup report notifier"

func build(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	var o imagebuild.Options
	var services, platforms, created string
	fs.StringVar(&o.BinDir, "bin", "bin", "directory holding <os>_<arch>/opswire-<service>")
	fs.StringVar(&o.OutDir, "out", "bin/images", "where the image archives are written")
	fs.StringVar(&services, "services", allServices, "services (space or comma separated)")
	fs.StringVar(&platforms, "platforms", "linux/amd64 linux/arm64", "platforms (space or comma separated)")
	fs.StringVar(&o.CACerts, "ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle copied into the images")
	fs.StringVar(&o.Repo, "repo", "opswire/opswire-", "local image name prefix (the archives' ref.name)")
	fs.StringVar(&o.Version, "version", "dev", "image tag and org.opencontainers.image.version")
	fs.StringVar(&o.Revision, "revision", "unknown", "org.opencontainers.image.revision")
	fs.StringVar(&o.Source, "source", "https://github.com/opswire/opswire", "org.opencontainers.image.source")
	fs.StringVar(&created, "created", "", "image creation time, RFC 3339 (default: the epoch, for reproducible images)")
	_ = fs.Parse(args)
	o.Services, o.Platforms = split(services), split(platforms)
	o.Created = time.Unix(0, 0).UTC()
	if created != "" {
		t, err := time.Parse(time.RFC3339, created)
		if err != nil {
			return fmt.Errorf("--created: %w", err)
		}
		o.Created = t.UTC()
	}
	paths, err := imagebuild.Build(o)
	if err != nil {
		return err
	}
	for _, p := range paths {
		fmt.Println(p)
	}
	return nil
}

func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ExitOnError)
	var o imagebuild.PushOptions
	var services string
	fs.StringVar(&o.Dir, "dir", "bin/images", "the archives of opswire-image build")
	fs.StringVar(&services, "services", allServices, "services (space or comma separated)")
	fs.StringVar(&o.Registry, "registry", "", "registry and path, e.g. ghcr.io/acme (images go to <registry>/opswire-<service>)")
	fs.StringVar(&o.Tag, "tag", "", "tag to push")
	fs.BoolVar(&o.Insecure, "insecure", false, "plain-HTTP registry")
	_ = fs.Parse(args)
	if o.Registry == "" || o.Tag == "" {
		return fmt.Errorf("push needs --registry and --tag")
	}
	o.Services = split(services)
	refs, err := imagebuild.Push(o)
	for _, r := range refs {
		fmt.Println(r)
	}
	return err
}

func split(s string) []string {
	return strings.Fields(strings.ReplaceAll(s, ",", " "))
}

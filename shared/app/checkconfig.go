package app

import (
	"errors"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/opswire/opswire/shared/config"
)

// checkConfig is --check-config: the same loading, defaulting and validation
// a starting service does, without connecting to anything, so a ConfigMap can
// be checked in CI before it is applied. A valid file prints the effective
// configuration (every default filled in, secrets shown as <redacted>) and
// exits 0; an invalid one prints every bad field, one per line, and exits 2.
// Given credentials, it also asks the cluster whether the service may take
// its Lease (checkLease).
func checkConfig(spec Spec, opts Options, stdout, stderr io.Writer) int {
	cfg, err := config.Load(opts.Config)
	if err == nil && opts.Cluster != "" {
		cfg.Cluster.Name = opts.Cluster
		err = cfg.Validate()
	}
	if err != nil {
		var fields config.Errors
		if errors.As(err, &fields) {
			fmt.Fprintf(stderr, "%s: %s: invalid configuration (%d problems):\n", spec.Binary(), opts.Config, len(fields))
			for _, fe := range fields {
				fmt.Fprintf(stderr, "  %s\n", fe.Error())
			}
		} else {
			fmt.Fprintf(stderr, "%s: %s: %v\n", spec.Binary(), opts.Config, err)
		}
		return ExitUsage
	}
	if spec.Service == "cordon" {
		for _, w := range cfg.AutoCordon.Warnings() {
			fmt.Fprintf(stderr, "%s: warning: %s\n", spec.Binary(), w)
		}
	}
	if !checkLease(spec, opts, cfg, stdout, stderr) {
		return ExitUsage
	}
	warnings, notes := configNotes(spec, cfg, topLevel(opts.Config), os.Getenv("TZ"))
	for _, w := range warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", spec.Binary(), w)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "%s: print configuration: %v\n", spec.Binary(), err)
		return ExitFailure
	}
	fmt.Fprintf(stdout, "# %s %s: %s is valid; effective configuration (defaults filled in, secrets redacted):\n",
		spec.Binary(), Version, opts.Config)
	if spec.Service == "notifier" {
		// The effective locale when the file names none: said as a YAML
		// comment, so the output stays a valid configuration.
		if _, note := cfg.NotifierLocale(); note != "" {
			fmt.Fprintf(stdout, "# note: %s\n", note)
		}
	}
	for _, n := range notes {
		fmt.Fprintf(stdout, "# note: %s\n", n)
	}
	_, _ = stdout.Write(out)
	return ExitOK
}

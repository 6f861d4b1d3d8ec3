// Package app implements the command-line contract of DESIGN §9 once for
// every opswire binary: the same flags (each with an OPSWIRE_<NAME>
// environment variable), the same exit codes (0 clean shutdown, 1 runtime
// failure, 2 invalid flags or configuration), signal handling, logging, the
// health/metrics server, and the clients a service asks for.
package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Version is set at build time with -ldflags "-X .../shared/app.Version=...".
var Version = "dev"

// DefaultConfigPath is where the ConfigMap is mounted (the seed used /opt/config.yml).
const DefaultConfigPath = "/etc/opswire/config.yml"

// Options are the parsed flags.
type Options struct {
	Config       string
	Kubeconfig   string
	NATSURL      string
	NATSCreds    string
	NATSUser     string
	NATSPassword string
	NATSTLSCert  string
	NATSTLSKey   string
	NATSTLSCA    string
	// NATSInboxPrefix is the reply-subject prefix; empty derives
	// _INBOX_<nats-user> (natsx.InboxPrefix), "_INBOX" is nats.go's default.
	NATSInboxPrefix string
	Cluster         string
	LogLevel        string
	LogFormat       string
	Listen          string
	DryRun          bool
	ID              string
	// ManageStreams: create or update the KUBE and OPS streams at start
	// (the default), or only wait for them to exist, so that the NATS user
	// needs no right to change them.
	ManageStreams bool
	// CheckConfig: load and validate the configuration, print the effective
	// configuration (secrets redacted) and exit, without connecting anywhere.
	CheckConfig bool
	// Pprof serves net/http/pprof under /debug/pprof/ on the --listen
	// address (off by default: profiles show internals to anyone who can
	// reach the port). The benchmarks use it to read each process's heap.
	Pprof bool
}

// Spec describes a binary.
type Spec struct {
	Service string // watcher, cordon, cleanup, report, notifier
	// Actor binaries accept --dry-run.
	Actor bool
	// NoKube binaries (the notifier) do not take --kubeconfig.
	NoKube bool
	// NoPublishBuffer: while NATS is disconnected a publish fails at once
	// instead of waiting in nats.go's reconnect buffer (actors imply it). A
	// service that retries every failed publish itself needs no buffer, and a
	// buffered copy would be sent unseen at reconnect: for the watcher, after
	// a newer state another replica stored meanwhile (docs/watcher.md).
	NoPublishBuffer bool
}

// Binary is the program name, opswire-<service>.
func (s Spec) Binary() string { return "opswire-" + s.Service }

// errHelp and errVersion end parsing successfully.
var (
	errHelp    = flag.ErrHelp
	errVersion = errors.New("version requested")
)

// parse reads flags, with OPSWIRE_<NAME> environment variables as defaults.
func parse(spec Spec, args []string, getenv func(string) string, out io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet(spec.Binary(), flag.ContinueOnError)
	fs.SetOutput(out)
	str := func(p *string, name, def, usage string) {
		if v := getenv(envName(name)); v != "" {
			def = v
		}
		fs.StringVar(p, name, def, usage+" (env "+envName(name)+")")
	}
	str(&o.Config, "config", DefaultConfigPath, "configuration file (the seed mounted it at /opt/config.yml)")
	if !spec.NoKube {
		str(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file; default $KUBECONFIG, then ~/.kube/config, then in-cluster")
	}
	str(&o.NATSURL, "nats-url", "nats://127.0.0.1:4222", "comma-separated NATS server URLs")
	str(&o.NATSCreds, "nats-creds", "", "NATS credentials file")
	str(&o.NATSUser, "nats-user", "", "NATS user")
	str(&o.NATSPassword, "nats-password", "", "NATS password (prefer the environment variable)")
	str(&o.NATSTLSCert, "nats-tls-cert", "", "client certificate for NATS TLS")
	str(&o.NATSTLSKey, "nats-tls-key", "", "client key for NATS TLS")
	str(&o.NATSTLSCA, "nats-tls-ca", "", "CA bundle for NATS TLS")
	str(&o.NATSInboxPrefix, "nats-inbox-prefix", "", "reply-subject prefix; default _INBOX_<nats-user> (_INBOX without a user)")
	str(&o.Cluster, "cluster", "", "cluster name in subjects; default config cluster.name, else \"default\"")
	str(&o.LogLevel, "log-level", "info", "debug, info, warn or error")
	str(&o.LogFormat, "log-format", "json", "json or console")
	str(&o.Listen, "listen", ":8080", "address of /healthz, /readyz and /metrics")
	id := getenv("POD_NAME")
	if id == "" {
		id, _ = os.Hostname()
	}
	str(&o.ID, "id", id, "leader-election identity; default $POD_NAME, else the hostname")
	// A boolean variable that does not parse is an error, never a silent
	// false: OPSWIRE_DRY_RUN=yes must not mean "act".
	var envErrs []string
	boolean := func(p *bool, name string, def bool, usage string) {
		if v := getenv(envName(name)); v != "" {
			if b, err := strconv.ParseBool(v); err != nil {
				envErrs = append(envErrs, fmt.Sprintf("%s: %q is not a boolean (true, false, 1, 0)", envName(name), v))
			} else {
				def = b
			}
		}
		fs.BoolVar(p, name, def, usage+" (env "+envName(name)+")")
	}
	if spec.Actor {
		boolean(&o.DryRun, "dry-run", false, "decide and publish, never write to the cluster")
	}
	boolean(&o.ManageStreams, "manage-streams", true,
		"create or update the KUBE and OPS streams at start; false: wait for them to exist (their creator is the watcher)")
	boolean(&o.Pprof, "pprof", false, "serve /debug/pprof/ (Go profiles) on the --listen address")
	fs.BoolVar(&o.CheckConfig, "check-config", false,
		"load and validate the configuration, print it with secrets redacted, and exit (0 valid, 2 invalid)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: %s [flags]\n\nFlags:\n", spec.Binary())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if len(envErrs) > 0 {
		return o, errors.New(strings.Join(envErrs, "; "))
	}
	if *version {
		return o, errVersion
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, nil
}

func envName(flagName string) string {
	return "OPSWIRE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Package cli is the opswire command: its flags, its subcommands and their
// output. It talks to NATS through a Records store, so the commands are
// tested without a server.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opswire/opswire/shared/pause"
)

// Exit codes: usage errors are told apart from failures, as kubectl does.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Records reads and writes the pause records of one cluster (pause.Store).
type Records interface {
	Pause(ctx context.Context, actor string, r pause.Record) error
	Resume(ctx context.Context, actor string) error
	Get(ctx context.Context, actor string) (pause.Record, bool, error)
}

// Env is what the command reads and writes outside its arguments.
type Env struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Now            func() time.Time // time.Now when nil
	// Connect opens the pause records of the cluster in cfg (connectNATS
	// when nil); close ends the connection.
	Connect func(ctx context.Context, cfg Config) (rec Records, close func(), err error)
}

// Config is the connection and output settings common to every subcommand.
type Config struct {
	NATSURL  string
	User     string
	Password string
	Cluster  string
	Output   string
	Timeout  time.Duration
}

// DefaultConfig holds the defaults; flags and OPSWIRE_* variables override them.
func DefaultConfig() Config {
	return Config{NATSURL: "nats://127.0.0.1:4222", User: "operator", Cluster: "default", Output: "table", Timeout: 10 * time.Second}
}

// Validate names every bad field.
func (c Config) Validate() error {
	var errs []string
	if c.NATSURL == "" {
		errs = append(errs, "--nats-url: empty (set it or OPSWIRE_NATS_URL)")
	}
	if c.User == "" {
		errs = append(errs, "--user: empty (set it or OPSWIRE_NATS_USER)")
	}
	if c.Cluster == "" || strings.ContainsAny(c.Cluster, ".*> \t") {
		errs = append(errs, fmt.Sprintf("--cluster: %q is not a cluster name (one NATS token)", c.Cluster))
	}
	if c.Output != "table" && c.Output != "json" {
		errs = append(errs, fmt.Sprintf("-o: %q, want table or json", c.Output))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Sprintf("--timeout: %s, want more than 0", c.Timeout))
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

const usage = `opswire: operate opswire (docs/operate.md)

Usage:
  opswire pause ACTOR|all [--for 2h] [--reason TEXT] [--by NAME]
  opswire resume ACTOR|all
  opswire status [-o table|json]

ACTOR is one of cordon, cleanup, report, notifier.

Flags of every command:
`

// Main runs the command line args and returns the exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if env.Connect == nil {
		env.Connect = connectNATS
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(env.Stderr, usage)
		def := DefaultConfig()
		newFlags(env, &def, &pauseFlags{}).PrintDefaults()
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	cmd, rest := args[0], args[1:]
	cfg := DefaultConfig()
	var pf pauseFlags
	fs := newFlags(env, &cfg, &pf)
	pos, err := parseInterleaved(fs, rest)
	if err != nil {
		fmt.Fprintf(env.Stderr, "opswire %s: %v\n", cmd, err)
		return ExitUsage
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(env.Stderr, "opswire %s: %v\n", cmd, err)
		return ExitUsage
	}
	switch cmd {
	case "pause", "resume":
		if len(pos) != 1 || !pause.ValidActor(pos[0]) {
			fmt.Fprintf(env.Stderr, "opswire %s: want one ACTOR (%s) or all, got %q\n", cmd, strings.Join(pause.Actors, ", "), pos)
			return ExitUsage
		}
		if cmd == "pause" && pf.forDur < 0 {
			fmt.Fprintf(env.Stderr, "opswire pause: --for %s: want 0 (until resumed) or more\n", pf.forDur)
			return ExitUsage
		}
	case "status":
		if len(pos) != 0 {
			fmt.Fprintf(env.Stderr, "opswire status: takes no arguments, got %q\n", pos)
			return ExitUsage
		}
	default:
		fmt.Fprintf(env.Stderr, "opswire: unknown command %q (pause, resume, status)\n", cmd)
		return ExitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	rec, closeConn, err := env.Connect(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "opswire %s: %v\n", cmd, err)
		return ExitError
	}
	defer closeConn()
	switch cmd {
	case "pause":
		err = runPause(ctx, rec, env, cfg, pos[0], pf)
	case "resume":
		err = runResume(ctx, rec, env, cfg, pos[0])
	default:
		err = runStatus(ctx, rec, env, cfg)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "opswire %s: %v\n", cmd, err)
		return ExitError
	}
	return ExitOK
}

type pauseFlags struct {
	forDur time.Duration
	reason string
	by     string
}

func newFlags(env Env, cfg *Config, pf *pauseFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("opswire", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	str := func(p *string, name, envName, def, help string) {
		if v := env.Getenv(envName); v != "" {
			def = v
		}
		if envName != "" {
			help += " (env " + envName + ")"
		}
		fs.StringVar(p, name, def, help)
	}
	str(&cfg.NATSURL, "nats-url", "OPSWIRE_NATS_URL", cfg.NATSURL, "NATS server URLs, comma-separated")
	str(&cfg.User, "user", "OPSWIRE_NATS_USER", cfg.User, "NATS user (deploy/'s operator writes pause records; audit may read them)")
	str(&cfg.Password, "password", "OPSWIRE_NATS_PASSWORD", cfg.Password, "NATS password (prefer the variable)")
	str(&cfg.Cluster, "cluster", "OPSWIRE_CLUSTER", cfg.Cluster, "cluster name (the services' --cluster, config cluster.name)")
	fs.StringVar(&cfg.Output, "o", cfg.Output, "output format: table or json")
	fs.StringVar(&cfg.Output, "output", cfg.Output, "output format: table or json")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "how long to wait for NATS")
	fs.DurationVar(&pf.forDur, "for", 0, "pause: how long; 0 until resumed")
	fs.StringVar(&pf.reason, "reason", "", "pause: why, shown in status and in every decision held back")
	str(&pf.by, "by", "USER", "", "pause: who")
	return fs
}

// parseInterleaved parses flags before, between and after the positional
// arguments (kubectl's "pause cordon --for 2h" as well as "--for 2h pause cordon").
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func runPause(ctx context.Context, rec Records, env Env, cfg Config, actor string, pf pauseFlags) error {
	now := env.Now().UTC()
	r := pause.Record{Since: now, Reason: pf.reason, By: pf.by}
	if pf.forDur > 0 {
		r.Until = now.Add(pf.forDur)
	}
	if err := rec.Pause(ctx, actor, r); err != nil {
		return err
	}
	if cfg.Output == "json" {
		return writeJSON(env.Stdout, statusOf(actor, r, true, ""))
	}
	fmt.Fprintf(env.Stdout, "%s %s in cluster %s\n", actor, r, cfg.Cluster)
	return nil
}

func runResume(ctx context.Context, rec Records, env Env, cfg Config, actor string) error {
	if err := rec.Resume(ctx, actor); err != nil {
		return err
	}
	if cfg.Output == "json" {
		return writeJSON(env.Stdout, Status{Actor: actor})
	}
	fmt.Fprintf(env.Stdout, "%s resumed in cluster %s\n", actor, cfg.Cluster)
	if actor != pause.All {
		if r, ok, err := rec.Get(ctx, pause.All); err == nil && ok && r.Active(env.Now()) {
			fmt.Fprintf(env.Stderr, "warning: %s is still held by the pause of all (%s): opswire resume all\n", actor, r)
		}
	}
	return nil
}

// Status is one actor's line of opswire status.
type Status struct {
	Actor  string    `json:"actor"`
	Paused bool      `json:"paused"`
	Via    string    `json:"via,omitempty"` // the record that holds it: the actor's own or all
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
}

func statusOf(actor string, r pause.Record, paused bool, via string) Status {
	if !paused {
		return Status{Actor: actor}
	}
	return Status{Actor: actor, Paused: true, Via: via, Since: r.Since, Until: r.Until, By: r.By, Reason: r.Reason}
}

func runStatus(ctx context.Context, rec Records, env Env, cfg Config) error {
	now := env.Now()
	all, allOK, err := rec.Get(ctx, pause.All)
	if err != nil {
		return err
	}
	allOK = allOK && all.Active(now)
	var out []Status
	for _, a := range pause.Actors {
		r, ok, err := rec.Get(ctx, a)
		if err != nil {
			return err
		}
		ok = ok && r.Active(now)
		switch {
		case ok && allOK && !longer(r, all):
			out = append(out, statusOf(a, all, true, pause.All))
		case ok:
			out = append(out, statusOf(a, r, true, a))
		case allOK:
			out = append(out, statusOf(a, all, true, pause.All))
		default:
			out = append(out, Status{Actor: a})
		}
	}
	if cfg.Output == "json" {
		return writeJSON(env.Stdout, out)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "ACTOR\tPAUSED\tVIA\tSINCE\tUNTIL\tBY\tREASON")
	for _, s := range out {
		if !s.Paused {
			fmt.Fprintf(tw, "%s\tno\t-\t-\t-\t-\t-\n", s.Actor)
			continue
		}
		until := "resumed"
		if !s.Until.IsZero() {
			until = s.Until.UTC().Format(time.RFC3339) + " (" + s.Until.Sub(now).Round(time.Second).String() + ")"
		}
		fmt.Fprintf(tw, "%s\tyes\t%s\t%s\t%s\t%s\t%s\n", s.Actor, s.Via, s.Since.UTC().Format(time.RFC3339), until, dash(s.By), dash(s.Reason))
	}
	return tw.Flush()
}

// longer reports whether a lasts at least as long as b (zero Until: forever).
func longer(a, b pause.Record) bool {
	if a.Until.IsZero() {
		return true
	}
	return !b.Until.IsZero() && !a.Until.Before(b.Until)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

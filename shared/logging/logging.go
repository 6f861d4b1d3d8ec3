// Package logging builds the zerolog logger every service uses: JSON for
// machines by default, console for people, with levels set from the command line.
package logging

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// TimeFormat stamps log lines to the millisecond: the services react within
// tens of milliseconds, so whole seconds would hide the order of events.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// New returns a logger writing to w at the given level ("debug", "info",
// "warn", "error") and format ("json" or "console").
func New(w io.Writer, level, format, service string) (zerolog.Logger, error) {
	zerolog.TimeFieldFormat = TimeFormat // process-wide; every service sets the same
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "json":
	case "console":
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: want json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("service", service).Logger(), nil
}

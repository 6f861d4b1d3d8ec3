// Package logging builds the zerolog logger every service uses: JSON for
// machines by default, console for people, with levels set from the command line.
package logging

import (
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"
)

// New returns a logger writing to w at the given level ("debug", "info",
// "warn", "error") and format ("json" or "console").
func New(w io.Writer, level, format, service string) (zerolog.Logger, error) {
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

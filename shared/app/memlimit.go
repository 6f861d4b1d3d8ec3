package app

import (
	"runtime/debug"

	"github.com/rs/zerolog"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MemoryLimitEnv names the container's memory limit (deploy/ sets it from
// the container's limits.memory through a resourceFieldRef): a byte count or
// a quantity such as 300Mi.
const MemoryLimitEnv = "OPSWIRE_MEMORY_LIMIT"

// memoryLimitShare is the part of the container limit given to the Go
// runtime as its soft memory limit; the rest is room for what the runtime
// does not count (binary text, C-free but unreturned pages).
const memoryLimitShare = 0.9

// applyMemoryLimit sets the Go runtime's soft memory limit from the
// container's limit, unless GOMEMLIMIT sets one already. Without it the heap
// may grow to twice the live heap before a collection (GOGC=100), and the
// resident set follows: at 150,000 pods the watcher's peak RSS was about twice
// its live heap. With it, the collector runs earlier as the process nears its
// limit instead of the process being OOM-killed. It returns the limit set (0
// for none).
func applyMemoryLimit(getenv func(string) string, log zerolog.Logger) int64 {
	v := getenv(MemoryLimitEnv)
	if v == "" || getenv("GOMEMLIMIT") != "" {
		return 0
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Value() <= 0 {
		log.Warn().Str(MemoryLimitEnv, v).Msg("not a memory quantity; no soft memory limit set")
		return 0
	}
	limit := int64(float64(q.Value()) * memoryLimitShare)
	debug.SetMemoryLimit(limit)
	log.Info().Int64("bytes", limit).Str("containerLimit", v).Msg("soft memory limit set")
	return limit
}

package main

import (
	"bufio"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Results are the metrics of every benchmark, by benchmark name (without
// the -GOMAXPROCS suffix) and unit.
type Results struct {
	Metrics  map[string]map[string]float64
	Logs     []string // "Benchmark: message" lines the benchmarks logged
	Failures []string // benchmarks that failed, with their message
	CPU      string   // the "cpu:" line of go test
}

// Run is the parsed output of one go test invocation.
type Run = Results

var (
	resultLine = regexp.MustCompile(`^(Benchmark[^\s]+?)(?:-\d+)?\s+(\d+)\s+(.+)$`)
	logLine    = regexp.MustCompile(`^\s+[\w.]+\.go:\d+: (.*)$`)
	failLine   = regexp.MustCompile(`^--- FAIL: (Benchmark\S+)`)
	benchStart = regexp.MustCompile(`^(?:--- BENCH: )?(Benchmark[^\s]+?)(?:-\d+)?\s*$`)
)

// Parse reads `go test -bench` output: result lines
// "BenchmarkX-2  1  123 ns/op  4.5 unit ...", the log lines that follow a
// benchmark, and failures.
func Parse(r io.Reader) *Results {
	res := &Results{Metrics: map[string]map[string]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	current := ""
	failing := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cpu: "):
			res.CPU = strings.TrimPrefix(line, "cpu: ")
		case failLine.MatchString(line):
			failing = failLine.FindStringSubmatch(line)[1]
			current = failing
		case resultLine.MatchString(line):
			m := resultLine.FindStringSubmatch(line)
			current, failing = m[1], ""
			res.Metrics[current] = parseMetrics(m[3])
		case benchStart.MatchString(line):
			current = benchStart.FindStringSubmatch(line)[1]
		case logLine.MatchString(line) && current != "":
			msg := logLine.FindStringSubmatch(line)[1]
			if failing != "" {
				res.Failures = append(res.Failures, failing+": "+msg)
			} else {
				res.Logs = append(res.Logs, current+": "+msg)
			}
		}
	}
	return res
}

// parseMetrics reads "value unit" pairs.
func parseMetrics(s string) map[string]float64 {
	out := map[string]float64{}
	f := strings.Fields(s)
	for i := 0; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			continue
		}
		out[f[i+1]] = v
	}
	return out
}

// Merge combines the results of several runs (later runs win on conflicts).
func Merge(runs ...*Results) *Results {
	out := &Results{Metrics: map[string]map[string]float64{}}
	for _, r := range runs {
		for name, m := range r.Metrics {
			out.Metrics[name] = m
		}
		out.Logs = append(out.Logs, r.Logs...)
		out.Failures = append(out.Failures, r.Failures...)
		if out.CPU == "" {
			out.CPU = r.CPU
		}
	}
	return out
}

// Get returns one metric.
func (r *Results) Get(bench, unit string) (float64, bool) {
	m, ok := r.Metrics[bench]
	if !ok {
		return 0, false
	}
	v, ok := m[unit]
	return v, ok
}

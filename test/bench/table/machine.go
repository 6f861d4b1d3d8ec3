package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// Machine describes where the benchmarks ran: the figures only mean
// something beside it (and beside the floors of the same run).
type Machine struct {
	CPU    string
	CPUs   int
	MemGiB float64
	Load   string // /proc/loadavg at the end of the run
}

// DescribeMachine reads the machine from the runtime and /proc.
func DescribeMachine(cpu string) Machine {
	m := Machine{CPU: cpu, CPUs: runtime.NumCPU()}
	if m.CPU == "" {
		m.CPU = runtime.GOARCH
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		for _, line := range strings.Split(string(b), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %f kB", &kb); err == nil {
				m.MemGiB = kb / (1 << 20)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.Load = strings.Join(f[:3], " ")
		}
	}
	return m
}

// Short is the machine column of the table.
func (m Machine) Short() string {
	return fmt.Sprintf("%s, %d CPU, %.0f GiB", m.CPU, m.CPUs, m.MemGiB)
}

func (m Machine) String() string {
	return fmt.Sprintf("%s (%s/%s, Go %s)", m.Short(), runtime.GOOS, runtime.GOARCH, strings.TrimPrefix(runtime.Version(), "go"))
}

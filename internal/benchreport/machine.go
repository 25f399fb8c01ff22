package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// machine describes where the benchmarks ran.
type machine struct {
	cpu       string
	cores     int // logical CPUs in /proc/cpuinfo, or runtime.NumCPU
	goVersion string
	osArch    string
	kernel    string
	clientGo  string
	revision  string
	date      time.Time
	// load is the 1-minute load average just before the run, "" where /proc/loadavg is
	// missing: other processes running at the same time skew the figures.
	load string
}

func describeMachine(root string) machine {
	m := machine{
		cpu:       "unknown",
		cores:     runtime.NumCPU(),
		goVersion: output(root, "go", "env", "GOVERSION"),
		osArch:    runtime.GOOS + "/" + runtime.GOARCH,
		clientGo:  output(root, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go"),
		revision:  output(root, "git", "describe", "--always", "--dirty", "--abbrev=12"),
		date:      time.Now().UTC(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		processors := 0
		s := bufio.NewScanner(f)
		for s.Scan() {
			key, value, ok := strings.Cut(s.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(key) {
			case "model name":
				if m.cpu == "unknown" {
					m.cpu = strings.Join(strings.Fields(value), " ")
				}
			case "processor":
				processors++
			}
		}
		if processors > 0 {
			m.cores = processors
		}
	}
	if m.goVersion == "" {
		m.goVersion = runtime.Version()
	}
	return m
}

// loadAverage returns the 1-minute load average, or "".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// output runs a command in dir and returns its trimmed output, or "" if it failed.
func output(dir, name string, args ...string) string {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

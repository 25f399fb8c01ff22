package main

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
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
	// missing: other processes running at the same time skew the figures. loadPeak is
	// the highest one sampled during the run, loadAfter the one right after it; both
	// include the benchmarks' own load (up to GOMAXPROCS busy threads).
	load, loadPeak, loadAfter string
}

// loadText describes the load averages of m for the report, "" if there are none.
func (m machine) loadText() string {
	if m.load == "" {
		return ""
	}
	text := m.load + " before the run"
	if m.loadPeak != "" {
		text += ", at most " + m.loadPeak + " during it"
	}
	if m.loadAfter != "" {
		text += ", " + m.loadAfter + " right after it"
	}
	return text + " (1-minute averages; during and after include the benchmarks' own load, up to " +
		"one per core; anything above that means other processes ran meanwhile and skewed the figures)"
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

// loadSampler records the highest 1-minute load average seen every interval until stop.
type loadSampler struct {
	stopped chan struct{}
	done    chan string
}

func sampleLoad(interval time.Duration) *loadSampler {
	l := &loadSampler{stopped: make(chan struct{}), done: make(chan string, 1)}
	go func() {
		peak, peakText := -1.0, ""
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			if s := loadAverage(); s != "" {
				if v, err := strconv.ParseFloat(s, 64); err == nil && v > peak {
					peak, peakText = v, s
				}
			}
			select {
			case <-l.stopped:
				l.done <- peakText
				return
			case <-t.C:
			}
		}
	}()
	return l
}

// stop ends the sampling and returns the highest load average seen, or "".
func (l *loadSampler) stop() string {
	close(l.stopped)
	return <-l.done
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

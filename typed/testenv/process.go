//go:build unix

package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

const (
	// readyTimeout bounds each wait for a process to become ready, on top of
	// the caller's context.
	readyTimeout = 2 * time.Minute
	// pollInterval is how often readiness is probed.
	pollInterval = 50 * time.Millisecond
	// tailLines and tailBytes bound the log excerpt in error messages.
	tailLines = 25
	tailBytes = 6000
)

// process is one run of a binary, in its own process group, with stdout and
// stderr appended to a log file.
type process struct {
	name    string
	logPath string
	// logOffset is where this run's output starts in the log file.
	logOffset int64
	cmd       *exec.Cmd
	done      chan struct{} // closed when the process has exited and been reaped
	waitErr   error         // valid after done is closed
}

// startProcess starts path with args in a new process group, appending its
// output to logPath.
// startAndWait starts the binary name of env's binary directory with args, its output
// going to logName in env's directory, and waits until ready says it is what; a process
// that does not get there is killed, and returned with the error for its log.
func (env *Environment) startAndWait(ctx context.Context, name string, args []string, logName, what string, ready func(context.Context) error) (*process, error) {
	p, err := startProcess(env.log, name, filepath.Join(env.binDir, name), args, filepath.Join(env.dir, logName))
	if err != nil {
		return nil, err
	}
	if err := p.waitUntil(ctx, what, ready); err != nil {
		p.kill(env.log)
		return p, err
	}
	return p, nil
}

func startProcess(log klog.Logger, name, path string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("testenv: opening the log of %s: %w", name, err)
	}
	defer logFile.Close() // the child keeps its own descriptor
	fi, err := logFile.Stat()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "=== testenv: %s starting %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))

	cmd := exec.Command(path, args...)
	cmd.Stdin = nil
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(cmd.SysProcAttr)
	release, err := startCommand(cmd)
	if err != nil {
		return nil, fmt.Errorf("testenv: starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, logOffset: fi.Size(), cmd: cmd, done: make(chan struct{})}
	go p.wait(release)
	log.V(1).Info("Started process", "name", name, "pid", cmd.Process.Pid, "log", logPath)
	return p, nil
}

// wait is the goroutine that reaps the process: [WaiterFunction] names it. It
// releases the spawner before it closes done, so that when the last process of
// the test binary has been stopped, no goroutine of this package is left.
func (p *process) wait(release func()) {
	p.waitErr = p.cmd.Wait()
	release()
	close(p.done)
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL if the process has not
// exited after gracePeriod, and waits until the process has exited. Stopping a process
// that has already exited is not an error.
func (p *process) stop(log klog.Logger, gracePeriod time.Duration) error {
	pgid := p.cmd.Process.Pid // Setpgid: the group id is the leader's pid
	if !p.exited() {
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("testenv: stopping %s: %w", p.name, err)
		}
		timer := time.NewTimer(gracePeriod)
		select {
		case <-p.done:
			timer.Stop()
		case <-timer.C:
			log.V(1).Info("Process did not exit after SIGTERM, sending SIGKILL", "name", p.name, "pid", pgid, "gracePeriod", gracePeriod)
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("testenv: killing %s: %w", p.name, err)
			}
			<-p.done
		}
	}
	// The binaries do not fork, but leave nothing of the group behind in
	// case they ever do.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	log.V(1).Info("Stopped process", "name", p.name, "pid", pgid, "exit", p.waitErr)
	return nil
}

// kill is stop with a short grace period for clean-up paths, where the error
// has nowhere to go.
func (p *process) kill(log klog.Logger) {
	if err := p.stop(log, time.Second); err != nil {
		log.Error(err, "Cannot stop process", "name", p.name)
	}
}

// exitError describes how the process ended, with the tail of its log.
// Call it only after done is closed.
func (p *process) exitError() error {
	return fmt.Errorf("testenv: %s exited unexpectedly (%v)%s", p.name, p.waitErr, p.logTail())
}

// logTail returns the last lines this run wrote to its log, formatted for an
// error message, or "" if there are none.
func (p *process) logTail() string {
	tail := readTail(p.logPath, p.logOffset)
	if tail == "" {
		return ""
	}
	return fmt.Sprintf("; last lines of %s:\n%s", p.logPath, tail)
}

// readTail returns at most tailLines lines, and tailBytes bytes, from the end
// of the file at path, reading nothing before offset.
func readTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	start := max(offset, fi.Size()-tailBytes)
	data, err := io.ReadAll(io.NewSectionReader(f, start, fi.Size()-start))
	if err != nil {
		return ""
	}
	data = bytes.TrimRight(data, "\n")
	lines := strings.Split(string(data), "\n")
	if start > offset && len(lines) > 1 {
		lines = lines[1:] // the first line was cut
	}
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return strings.Join(lines, "\n")
}

// waitUntil polls ready until it returns nil, the process exits, ctx is done
// or readyTimeout has passed. The error of a failed wait includes the tail of
// the process's log and the last reason ready gave.
func (p *process) waitUntil(ctx context.Context, what string, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		err := p.probe(ctx, ready)
		if err == nil {
			// A process that exits right away (say, its port was taken)
			// cannot be the one that answered, unless it answered before
			// dying; treat that as a failure too.
			if p.exited() {
				return p.exitError()
			}
			return nil
		}
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("testenv: waiting for %s to be %s: %w (last check: %v)%s", p.name, what, context.Cause(ctx), err, p.logTail())
		case <-ticker.C:
		}
	}
}

// probe runs ready with a timeout of five seconds, cut short if the process
// exits: whatever answers on its port then is not the process.
func (p *process) probe(ctx context.Context, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ready(ctx)
}

// portInUse reports whether the log of this run says a port was taken.
func (p *process) portInUse() bool {
	return strings.Contains(readTail(p.logPath, p.logOffset), "address already in use")
}

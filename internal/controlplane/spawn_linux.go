//go:build linux

package controlplane

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// setParentDeathSignal makes the kernel SIGKILL the child when its parent
// dies, so that a test binary that crashes or times out leaves no etcd or
// kube-apiserver behind.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}

var (
	spawnOnce     sync.Once
	spawnRequests chan func()
)

// startCommand starts cmd from one OS thread that lives as long as the
// process. Linux sends the parent-death signal when the thread that forked
// the child exits, not the process, and the Go runtime may end threads
// (https://go.dev/issue/27505); a goroutine locked to its thread that never
// returns keeps that thread alive.
func startCommand(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must not exit
			for f := range spawnRequests {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnRequests <- func() { errc <- cmd.Start() }
	return <-errc
}

//go:build linux

package testenv

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

// spawner is the goroutine, locked to its OS thread, that forks every child
// process. Linux sends the parent-death signal when the thread that forked the
// child exits, not the process, and the Go runtime may end threads
// (https://go.dev/issue/27505); so that thread must live as long as any child.
// It lives exactly that long: the first start creates it, and the reaping of the
// last live child ends it (a goroutine that returns while locked to its thread
// ends the thread too, which is fine once no child is left).
var spawner struct {
	mu       sync.Mutex
	requests chan func()   // nil while no spawner runs
	done     chan struct{} // closed when the running spawner has returned
	children int           // started and not yet reaped
}

// spawnLoop is the spawner goroutine: [SpawnerFunction] names it.
func spawnLoop(requests <-chan func(), done chan<- struct{}) {
	defer close(done)
	runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
	for f := range requests {
		f()
	}
}

// startCommand starts cmd from the spawner's thread. Unless it fails, the
// caller must call release once the child has been reaped (cmd.Wait returned).
func startCommand(cmd *exec.Cmd) (release func(), err error) {
	spawner.mu.Lock()
	if spawner.requests == nil {
		spawner.requests = make(chan func())
		spawner.done = make(chan struct{})
		go spawnLoop(spawner.requests, spawner.done)
	}
	spawner.children++
	requests := spawner.requests
	spawner.mu.Unlock()

	errc := make(chan error, 1)
	requests <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		releaseChild()
		return nil, err
	}
	return releaseChild, nil
}

// releaseChild counts a child as reaped, and ends the spawner (waiting until it
// has returned) when it was the last.
func releaseChild() {
	spawner.mu.Lock()
	defer spawner.mu.Unlock()
	spawner.children--
	if spawner.children > 0 {
		return
	}
	close(spawner.requests)
	<-spawner.done
	spawner.requests, spawner.done = nil, nil
}

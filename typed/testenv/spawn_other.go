//go:build unix && !linux

package testenv

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal does nothing: only Linux has a parent-death signal.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// startCommand starts cmd; release does nothing.
func startCommand(cmd *exec.Cmd) (release func(), err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {}, nil
}

//go:build unix && !linux

package controlplane

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal does nothing: only Linux has a parent-death signal.
func setParentDeathSignal(*syscall.SysProcAttr) {}

// startCommand starts cmd.
func startCommand(cmd *exec.Cmd) error { return cmd.Start() }

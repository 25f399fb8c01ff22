//go:build unix

// Package controlplane is the name under which the repository's own tests, benchmarks
// and examples start a local etcd and kube-apiserver. It is a thin alias of the public
// package typed/testenv, which holds the implementation and the documentation: new code
// should use testenv directly.
package controlplane

import (
	"context"
	"testing"

	"github.com/typedinformer/typedinformer/typed/testenv"
)

// ControlPlane is [testenv.Environment].
type ControlPlane = testenv.Environment

// Options is [testenv.Options].
type Options = testenv.Options

// EnvBinDir is [testenv.EnvBinDir].
const EnvBinDir = testenv.EnvBinDir

// SpawnerFunction and WaiterFunction are [testenv.SpawnerFunction] and
// [testenv.WaiterFunction], the goroutines that goroutine-leak checks ignore while a
// control plane runs.
const (
	SpawnerFunction = testenv.SpawnerFunction
	WaiterFunction  = testenv.WaiterFunction
)

// Start is [testenv.StartContext].
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	return testenv.StartContext(ctx, opts)
}

// StartForTest is [testenv.Start] with default options.
func StartForTest(t testing.TB) *ControlPlane {
	t.Helper()
	return testenv.Start(t, testenv.Options{})
}

//go:build unix

package controlplane_test

import (
	"context"
	"errors"
	"testing"

	"github.com/typedinformer/typedinformer/internal/controlplane"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// The names are aliases of testenv's: a *ControlPlane is a *testenv.Environment, and
// the implementation and its tests live in typed/testenv.
var _ *testenv.Environment = (*controlplane.ControlPlane)(nil)

func TestStartIsTestenvs(t *testing.T) {
	_, err := controlplane.Start(context.Background(), controlplane.Options{BinDir: t.TempDir()})
	if !errors.Is(err, testenv.ErrNoBinaries) {
		t.Fatalf("Start without binaries: got %v, want testenv.ErrNoBinaries", err)
	}
	if controlplane.EnvBinDir != testenv.EnvBinDir || controlplane.SpawnerFunction != testenv.SpawnerFunction || controlplane.WaiterFunction != testenv.WaiterFunction {
		t.Error("the constants differ from testenv's")
	}
}

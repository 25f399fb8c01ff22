// Package testctl makes the controllers of the repository's own tests: New is
// controller.New for a test that expects its arguments to be right, so that a test of
// something else does not spell out New's error check.
package testctl

import (
	"testing"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/event"
	"github.com/typedinformer/typedinformer/reflect"
)

// New returns controller.New(lw, opts), and ends the test at once if New refuses them.
func New[T event.Object, L reflect.List](tb testing.TB, lw controller.ListerWatcher[T, L], opts controller.Options[T]) *controller.Controller[T, L] {
	tb.Helper()
	c, err := controller.New(lw, opts)
	if err != nil {
		tb.Fatalf("controller.New: %v", err)
	}
	return c
}

package leaderelection_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/typedinformer/typedinformer/internal/testsupport/testwait"
)

// testTimeout bounds every wait in this package's tests. A test that waits longer has
// hung: it fails naming what it waited for, with the stacks of the goroutines then
// running, instead of the whole package failing at go test's -timeout with the test
// unnamed.
const testTimeout = 60 * time.Second

// receive returns the next value from ch (the zero value once ch is closed), failing t
// with what and the goroutines' stacks if none comes within testTimeout.
func receive[V any](t *testing.T, ch <-chan V, what string) V {
	t.Helper()
	return testwait.Receive(t, ch, what, testTimeout)
}

// verifyNoLeaks fails t if any goroutine but the test's own is still running. The
// package's tests start no control plane (its end-to-end tests are in internal/e2e), so
// nothing is ignored.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t)
}

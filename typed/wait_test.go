package typed_test

import (
	"strings"
	"testing"
	"time"
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
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("%s: not within %v; goroutines of the module:\n\n%s", what, testTimeout,
			strings.Join(e2eGoroutines([]string{"github.com/typedinformer/typedinformer/"}), "\n\n"))
	}
	var zero V
	return zero
}

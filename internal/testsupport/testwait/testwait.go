// Package testwait holds the waits shared by the unit tests of packages typed and
// controller and the end-to-end tests of internal/e2e: a receive and a poll that, when
// they time out, name what they waited for and show the goroutines then running, and a
// filter of goroutine stacks.
package testwait

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// Module is the import path prefix of this module's packages, as it appears in stacks.
const Module = "github.com/typedinformer/typedinformer/"

// Timeout bounds the waits of unit tests that take no bound of their own (Recv). A test
// that waits longer has hung: it fails naming what it waited for, with the stacks of the
// goroutines then running, instead of the whole package failing at go test's -timeout
// with the test unnamed.
const Timeout = 60 * time.Second

// Recv is Receive within Timeout.
func Recv[V any](t testing.TB, ch <-chan V, what string) V {
	t.Helper()
	return Receive(t, ch, what, Timeout)
}

// Receive returns the next value from ch (the zero value once ch is closed), failing t
// with what and the stacks of the module's goroutines if none comes within d.
func Receive[V any](t testing.TB, ch <-chan V, what string, d time.Duration) V {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: not within %v; goroutines of the module:\n\n%s", what, d,
			strings.Join(Goroutines([]string{Module}), "\n\n"))
	}
	var zero V
	return zero
}

// Eventually polls cond every millisecond until it holds, failing t with what and the
// stacks of the module's goroutines if it does not within d.
func Eventually(t testing.TB, what string, cond func() bool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; goroutines of the module:\n\n%s", what, d,
				strings.Join(Goroutines([]string{Module}), "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

// Goroutines returns the stacks of the goroutines that run any of fns (function names or
// "created by" lines as they appear in a stack trace) and, unless states is empty, are
// blocked in one of states (as in "goroutine 7 [chan send]:").
func Goroutines(fns []string, states ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if !slices.ContainsFunc(fns, func(fn string) bool { return strings.Contains(g, fn) }) {
			continue
		}
		if len(states) == 0 || slices.ContainsFunc(states, func(st string) bool { return strings.Contains(header, "["+st) }) {
			out = append(out, g)
		}
	}
	return out
}

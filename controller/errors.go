package controller

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNilArgument is returned, wrapped with what was nil, by every constructor, method and
// function of this module given a nil (or typed-nil) argument it needs: a nil
// reconciler, source, mapping, predicate, client or function. One sentinel for the whole
// module, so that errors.Is(err, controller.ErrNilArgument) finds any of them.
var ErrNilArgument = errors.New("nil argument")

// ErrInvalidOptions is returned, wrapped with what is wrong, by New for options that
// cannot work together.
var ErrInvalidOptions = errors.New("invalid controller options")

// ErrAlreadyRunning is returned, wrapped with what runs, by the Run of a value that is
// running, or that runs only once and has run: a Controller or a Manager (once), a Loop,
// a Recorder or a Sharder (not twice at once). One sentinel for the whole module.
var ErrAlreadyRunning = errors.New("already running")

// PanicError reports a panic recovered from users' code that this module calls: a
// handler (which goes on with its next event), a reconciler (whose key is retried like
// any other error) or a Manager's runnable (which stops the Manager like an error). One
// type for all, so that errors.As(err, &p) finds any of them.
type PanicError struct {
	// Kind says what panicked: "handler", "reconcile" or "runnable".
	Kind string
	// Name is the handler's or runnable's name, or the reconcile loop's.
	Name string
	// Key is the key being handled or reconciled; "" for a runnable.
	Key string
	// Event describes the event being handled (see event.Event.String); "" but for a
	// handler.
	Event string
	// Value is what was panicked with.
	Value any
	// Stack is the panicking goroutine's stack at the panic.
	Stack []byte
}

// Error describes the panic: what panicked, on which event and key.
func (e *PanicError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q panicked", e.Kind, e.Name)
	if e.Event != "" {
		fmt.Fprintf(&b, " on %s", e.Event)
	}
	if e.Key != "" {
		fmt.Fprintf(&b, " (key %s)", e.Key)
	}
	fmt.Fprintf(&b, ": %v", e.Value)
	return b.String()
}

// ErrNilHandler is returned, wrapped, by AddHandler for a nil Handler, typed nil
// included (a nil HandlerFunc, a nil pointer).
var ErrNilHandler = errors.New("nil handler")

// ErrStopped is returned by AddHandler once Run's context has ended.
var ErrStopped = errors.New("controller stopped")

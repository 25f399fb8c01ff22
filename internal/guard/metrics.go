package guard

import (
	"context"

	"k8s.io/klog/v2"
)

// Metrics calls a user's metrics sink M, any interface of the library's Metrics family,
// so that a panic in one of its methods is recovered and logged instead of ending the
// process: sinks are users' code, called on the library's goroutines. It is generic so
// that one wrapper serves every interface of the family, where a wrapper type per
// interface would restate each method. The zero value has no sink and calls nothing.
type Metrics[M any] struct {
	sink M
	set  bool
	// kind ("reflector", "controller", "loop", "sharder") and name identify the component
	// in the log line of a panic.
	kind, name string
}

// NewMetrics returns the Metrics of sink for the component kind named name. A nil or
// typed-nil sink is none: Set is false and Call calls nothing.
func NewMetrics[M any](sink M, kind, name string) Metrics[M] {
	return Metrics[M]{sink: sink, set: !IsNil(sink), kind: kind, name: name}
}

// Set reports whether there is a sink, for a caller that measures (a latency) only to
// report it.
func (m Metrics[M]) Set() bool { return m.set }

// Call calls call with the sink, unless there is none. A panic in it is recovered and
// logged at error level through ctx's logger as "Metrics.<method> panicked", with the
// component's kind and name, the value and the stack.
func (m Metrics[M]) Call(ctx context.Context, method string, call func(M)) {
	if !m.set {
		return
	}
	defer func() { // on every event: nothing is built unless it panicked
		if v := recover(); v != nil {
			Logged(klog.FromContext(ctx), v, nil, "Metrics."+method+" panicked", m.kind, m.name)
		}
	}()
	call(m.sink)
}

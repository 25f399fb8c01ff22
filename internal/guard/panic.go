package guard

import (
	"fmt"
	"runtime/debug"

	"k8s.io/klog/v2"
)

// LogPanic, deferred around a call of user code, recovers a panic and logs it at error
// level with msg, keysAndValues, the panic's value ("panic") and the stack ("stack"). err
// is the error the callback was handling, logged as the line's error; when nil, the panic
// is. It must itself be the deferred call: recover works only there. Its arguments are
// evaluated when the defer runs, even when nothing panics: on a path taken for every
// event, defer a closure that calls Logged only with what recover returned.
func LogPanic(logger klog.Logger, err error, msg string, keysAndValues ...any) {
	if v := recover(); v != nil {
		Logged(logger, v, err, msg, keysAndValues...)
	}
}

// Logged logs v, a value recover returned, as LogPanic does.
func Logged(logger klog.Logger, v any, err error, msg string, keysAndValues ...any) {
	if err == nil {
		err = fmt.Errorf("panic: %v", v)
	}
	logger.Error(err, msg, append(keysAndValues, "panic", v, "stack", string(debug.Stack()))...)
}

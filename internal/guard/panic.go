package guard

import (
	"fmt"
	"runtime/debug"

	"k8s.io/klog/v2"
)

// Log, deferred around a call of user code, recovers a panic and logs it at error level
// with msg, keysAndValues, the panic's value ("panic") and the stack ("stack"). err is
// the error the callback was handling, logged as the line's error; when nil, the panic
// is. It must itself be the deferred call: recover works only there.
func LogPanic(logger klog.Logger, err error, msg string, keysAndValues ...any) {
	v := recover()
	if v == nil {
		return
	}
	if err == nil {
		err = fmt.Errorf("panic: %v", v)
	}
	logger.Error(err, msg, append(keysAndValues, "panic", v, "stack", string(debug.Stack()))...)
}

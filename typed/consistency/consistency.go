package consistency

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// Recorder receives the writes of one reconcile. A typed.Loop provides it through the
// reconcile's context; an implementation must be safe for concurrent use.
type Recorder interface {
	// Wrote records that the server answered a write with obj: a create, an update, a
	// patch or an apply, of the object or of its status, or a deletion that left the
	// object in place (finalizers pending).
	Wrote(obj runtime.Object)
	// Deleted records that obj was deleted and is gone from the server: the caches must
	// no longer hold it.
	Deleted(obj runtime.Object)
}

type recorderKey struct{}

// WithRecorder returns a context whose writes are recorded by r.
func WithRecorder(ctx context.Context, r Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

// RecorderContext is a context carrying a Recorder, which a Recorder can hold in its own
// struct, so that a context with it costs one allocation instead of WithRecorder's two:
// the Loop makes one per reconcile.
type RecorderContext struct {
	context.Context
	Recorder Recorder
}

// Value returns c.Recorder for the Recorder's key, and asks the parent otherwise.
func (c *RecorderContext) Value(key any) any {
	if key == (recorderKey{}) {
		return c.Recorder
	}
	return c.Context.Value(key)
}

// RecorderFrom returns ctx's Recorder, if any: none for a nil ctx, nor for a nil or
// typed-nil Recorder.
func RecorderFrom(ctx context.Context) (Recorder, bool) {
	if ctx == nil {
		return nil, false
	}
	r, ok := ctx.Value(recorderKey{}).(Recorder)
	return r, ok && !guard.IsNil(r)
}

// Wrote records, for the key whose reconcile ctx belongs to, that the server answered a
// write with obj (the object it returned, not the one sent). It does nothing outside a
// reconcile, for a nil or typed-nil obj, and for an object without a resourceVersion.
func Wrote(ctx context.Context, obj runtime.Object) {
	if r, ok := RecorderFrom(ctx); ok && !guard.IsNil(obj) {
		r.Wrote(obj)
	}
}

// Deleted records, for the key whose reconcile ctx belongs to, that obj was deleted and
// the server no longer has it: the key is not reconciled again while a cache of the
// reconcile loop still holds an object with obj's namespace, name and UID. It does
// nothing outside a reconcile and for a nil or typed-nil obj.
func Deleted(ctx context.Context, obj runtime.Object) {
	if r, ok := RecorderFrom(ctx); ok && !guard.IsNil(obj) {
		r.Deleted(obj)
	}
}

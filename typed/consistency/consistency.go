// Package consistency records, for the key being reconciled, the writes a reconcile makes,
// so that the reconcile loop does not reconcile that key again until the caches it reads
// have caught up with them: read-your-writes.
//
// A reconcile that acts on a cache older than its own last write repeats a create the
// cache does not show yet, computes a status from before its last status write, or cleans
// up an object already replaced. The Loop (typed.Loop) therefore puts a Recorder in each
// reconcile's context; the library's writers (package write) report every successful
// write to it, and a reconciler that writes through a client of its own reports its
// writes with one call of Wrote or Deleted. Outside a reconcile, or with the Loop's
// read-your-writes turned off, these calls do nothing.
//
// What is recorded is the object the server returned: its type, namespace, name, UID and
// resourceVersion. The request's own resourceVersion is never recorded, and a write that
// failed records nothing. A deletion whose response carries no object is recorded with
// Deleted: the key waits until the caches no longer hold that object.
package consistency

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
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

// RecorderFrom returns ctx's Recorder, if any.
func RecorderFrom(ctx context.Context) (Recorder, bool) {
	r, ok := ctx.Value(recorderKey{}).(Recorder)
	return r, ok && r != nil
}

// Wrote records, for the key whose reconcile ctx belongs to, that the server answered a
// write with obj (the object it returned, not the one sent). It does nothing outside a
// reconcile, for a nil obj, and for an object without a resourceVersion.
func Wrote(ctx context.Context, obj runtime.Object) {
	if r, ok := RecorderFrom(ctx); ok && obj != nil {
		r.Wrote(obj)
	}
}

// Deleted records, for the key whose reconcile ctx belongs to, that obj was deleted and
// the server no longer has it: the key is not reconciled again while a cache of the
// reconcile loop still holds an object with obj's namespace, name and UID. It does
// nothing outside a reconcile and for a nil obj.
func Deleted(ctx context.Context, obj runtime.Object) {
	if r, ok := RecorderFrom(ctx); ok && obj != nil {
		r.Deleted(obj)
	}
}

package reflect

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/typedinformer/typedinformer/internal/guard"
)

// Unreadable stands, in a watch event, for an object that a ListerWatcher received but
// could not turn into its T, such as a custom resource that no longer converts to its Go
// struct. The reflector reports Err through Options.OnError and skips the event, so the
// cached state of the object is kept; during a watch-list's initial events it also makes
// the list incomplete (see ErrIncompleteList). In a DELETED event, where the server says
// the object is gone, the reflector records a final-state-unknown deletion keyed by
// Object's metadata, which the handlers receive with the last known state, so that the
// deletion is not lost.
//
// A ListerWatcher that converts objects sends an Unreadable rather than dropping the
// event, so that the failure reaches the reflector's error handler with its detail.
//
// It implements runtime.Object with methods of its own rather than by embedding Object,
// so that an Unreadable whose Object is nil does not panic whoever copies it.
type Unreadable struct {
	// Object is what was received, for context; it may be nil.
	Object runtime.Object
	// Err says why Object could not be read.
	Err error
}

// GetObjectKind returns the kind of Object, or an empty kind when there is none.
func (u *Unreadable) GetObjectKind() schema.ObjectKind {
	if u == nil || guard.IsNil(u.Object) {
		return schema.EmptyObjectKind
	}
	return u.Object.GetObjectKind()
}

// DeepCopyObject returns a copy with a deep copy of Object and the same Err.
func (u *Unreadable) DeepCopyObject() runtime.Object {
	if u == nil {
		return (*Unreadable)(nil)
	}
	out := &Unreadable{Err: u.Err}
	if !guard.IsNil(u.Object) {
		out.Object = u.Object.DeepCopyObject()
	}
	return out
}

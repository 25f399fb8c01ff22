package write

import (
	"errors"
	"fmt"
	goreflect "reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/internal/guard"
	"github.com/typedinformer/typedinformer/typed/client"
)

// ErrGone is wrapped, together with the server's NotFound error, by a write to an object
// that no longer exists: a status update or a finalizer added to an object deleted since
// it was read. The object is never created again by such a write. An object deleted and
// created again under its name (another UID) since it was read is gone too: nothing is
// written to the new object, and the error wraps, with ErrGone, the server's NotFound or
// one made by the writer that names both UIDs (apierrors.IsNotFound sees either).
var ErrGone = errors.New("object no longer exists")

// ErrNoStatusSubresource is wrapped by a status update of an object whose kind has no
// status subresource on the server (a CustomResourceDefinition without
// subresources.status): the server answers such a write with NotFound although the
// object exists.
var ErrNoStatusSubresource = errors.New("the kind has no status subresource")

// ErrNilObject is wrapped by a write whose client answered with a nil (or typed-nil)
// object and no error: the writer does not have the state the server wrote, and going on
// from its own copy could act on a state the server never had. The write is not retried
// by the writer; the error names the client's verb. It is client.ErrNilObject, the same
// variable: a client.Dynamic whose dynamic client answers nil returns it before the
// writer sees the nil, and errors.Is finds it either way.
var ErrNilObject = client.ErrNilObject

// ErrControlledByOther is what an OwnerConflictError is (errors.Is): the object to create
// or update exists and another owner's controller reference is on it.
var ErrControlledByOther = errors.New("controlled by another owner")

// WriteError reports a write that failed: what was done, to which object, and why. Err
// wraps the cause, so errors.Is and errors.As see ErrGone, ErrNoStatusSubresource, an
// *OwnerConflictError, controller.ErrNilArgument and the API server's errors
// (apierrors.IsConflict, apierrors.IsNotFound) through it.
type WriteError struct {
	// Op is what was being done, such as "updating status of" or
	// "adding finalizer example.com/cleanup to".
	Op string
	// Kind is the object's kind: its TypeMeta's, or else the name of its Go type.
	Kind string
	// Namespace ("" for cluster-scoped objects) and Name identify the object.
	Namespace, Name string
	// Err is why the write failed.
	Err error
}

// Error says what failed on which object, and why.
func (e *WriteError) Error() string {
	return fmt.Sprintf("%s %s %s: %v", e.Op, e.Kind, klog.KRef(e.Namespace, e.Name), e.Err)
}

// Unwrap returns the cause.
func (e *WriteError) Unwrap() error { return e.Err }

// OwnerConflictError reports an object that the write would have taken from its
// controller: it is controlled by Controller, not by Wanted. Nothing is written.
type OwnerConflictError struct {
	// Controller is the controller reference already on the object.
	Controller metav1.OwnerReference
	// Wanted is the controller reference the write was for.
	Wanted metav1.OwnerReference
}

// Error names both controllers.
func (e *OwnerConflictError) Error() string {
	return fmt.Sprintf("%v: it is controlled by %s %s (uid %s), not by %s %s (uid %s)", ErrControlledByOther,
		e.Controller.Kind, e.Controller.Name, e.Controller.UID, e.Wanted.Kind, e.Wanted.Name, e.Wanted.UID)
}

// Is makes errors.Is(err, ErrControlledByOther) true.
func (e *OwnerConflictError) Is(target error) bool { return target == ErrControlledByOther }

// writeError returns a *WriteError for op on obj, or nil when err is nil. A NotFound
// error also wraps ErrGone when gone is true: callers that know the object itself, not
// a subresource, is missing say so.
func writeError(op string, obj runtime.Object, namespace, name string, err error, gone bool) error {
	if err == nil {
		return nil
	}
	if gone && apierrors.IsNotFound(err) && !errors.Is(err, ErrGone) {
		err = fmt.Errorf("%w: %w", ErrGone, err)
	}
	return &WriteError{Op: op, Kind: kindOf(obj), Namespace: namespace, Name: name, Err: err}
}

// kindOf returns obj's kind from its TypeMeta, which typed clients' objects lack, or
// else the name of its Go type.
func kindOf(obj runtime.Object) string {
	if guard.IsNil(obj) {
		if t := goreflect.TypeOf(obj); t != nil && t.Kind() == goreflect.Pointer {
			return t.Elem().Name()
		}
		return "object"
	}
	if kind := obj.GetObjectKind().GroupVersionKind().Kind; kind != "" {
		return kind
	}
	t := goreflect.TypeOf(obj)
	if t.Kind() == goreflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// ErrInvalidOwner is wrapped by a CreateOrUpdate whose owner cannot own the object: it
// has no name or UID (it was not read from the server), its apiVersion and kind differ
// from the owner kind Owned was made with, or it is namespaced and the object is in
// another namespace, which an owner reference cannot express (the garbage collector would
// take the owner for absent and delete the object).
var ErrInvalidOwner = errors.New("invalid owner")

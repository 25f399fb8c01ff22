package write

import (
	"errors"
	"fmt"
	goreflect "reflect"
	"strconv"
	"strings"

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
// controller: it is controlled by Controller, not by Wanted. Nothing is written. For
// Owned.CreateOnly, which never updates, it also reports an object found with no
// controller at all (Controller is then the zero value).
type OwnerConflictError struct {
	// Controller is the controller reference already on the object.
	Controller metav1.OwnerReference
	// Wanted is the controller reference the write was for.
	Wanted metav1.OwnerReference
}

// Error names both controllers.
func (e *OwnerConflictError) Error() string {
	if e.Controller.UID == "" {
		return fmt.Sprintf("%v: it has no controller, not %s %s (uid %s), and would have to be updated to be adopted", ErrControlledByOther,
			e.Wanted.Kind, e.Wanted.Name, e.Wanted.UID)
	}
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

// ErrNoFieldManager is wrapped by an apply made with no field manager: none given to the
// writer (WithFieldManager) nor carried by the context (the function WithFieldManager,
// which a manager.Manager sets). The server needs one, and a name guessed here could
// be another program's, whose fields the apply would then take or drop.
var ErrNoFieldManager = errors.New("no field manager: give the writer one, or run it under a manager.Manager (Options.FieldManager)")

// ErrApplyConflict is what an ApplyConflictError is (errors.Is).
var ErrApplyConflict = errors.New("apply conflict")

// FieldConflict is one field that an apply, without force, would have taken from another
// field manager.
type FieldConflict struct {
	// Field is the field's path as the server writes it, such as ".spec.replicas".
	Field string
	// Manager is the field manager owning it, such as "kubectl" or "hpa-controller".
	Manager string
	// Subresource is the subresource the manager wrote it through ("scale", "status"),
	// if any.
	Subresource string
	// Message is the server's description of the conflict, in full.
	Message string
}

// ApplyConflictError reports an apply, without force, that set fields other field
// managers own with other values: nothing was written. Apply again with force
// (WithForce) to take the fields, or leave them out of the intent to leave them to
// their managers. It is wrapped by a *WriteError naming the object.
type ApplyConflictError struct {
	// Conflicts are the fields, each with its manager, in the server's order.
	Conflicts []FieldConflict
	// Err is the server's error (apierrors.IsConflict).
	Err error
}

// Error names every field and its manager.
func (e *ApplyConflictError) Error() string {
	var b strings.Builder
	b.WriteString(ErrApplyConflict.Error())
	for i, c := range e.Conflicts {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s is owned by %q", c.Field, c.Manager)
		if c.Subresource != "" {
			fmt.Fprintf(&b, " (through subresource %s)", c.Subresource)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrApplyConflict) true.
func (e *ApplyConflictError) Is(target error) bool { return target == ErrApplyConflict }

// Unwrap returns the server's error.
func (e *ApplyConflictError) Unwrap() error { return e.Err }

// applyConflict returns err as an *ApplyConflictError when it is the server's answer to
// an apply that conflicts (409 with causes of type FieldManagerConflict), else nil.
// A cause's message is `conflict with "manager"`, followed, for a manager that did not
// apply, by ` with subresource "scale"` and ` using apps/v1 at <time>`
// (k8s.io/apimachinery/pkg/util/managedfields/internal.NewConflictError).
func applyConflict(err error) *ApplyConflictError {
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var out ApplyConflictError
	for _, c := range status.Status().Details.Causes {
		if c.Type != metav1.CauseTypeFieldManagerConflict {
			continue
		}
		fc := FieldConflict{Field: c.Field, Message: c.Message}
		rest := strings.TrimPrefix(c.Message, "conflict with ")
		if quoted, qerr := strconv.QuotedPrefix(rest); qerr == nil {
			fc.Manager, _ = strconv.Unquote(quoted)
			if after, ok := strings.CutPrefix(rest[len(quoted):], " with subresource "); ok {
				if sub, qerr := strconv.QuotedPrefix(after); qerr == nil {
					fc.Subresource, _ = strconv.Unquote(sub)
				}
			}
		}
		out.Conflicts = append(out.Conflicts, fc)
	}
	if len(out.Conflicts) == 0 {
		return nil
	}
	out.Err = err
	return &out
}

package crd

import (
	"errors"
	"fmt"
	"reflect"
)

// The sentinel errors of this package, matched through errors.Is. Every error
// Build, Install and WriteYAML return wraps one of them, so a caller can tell
// a mistake in its Go types from one in its options or from the server's
// refusal without parsing messages.
var (
	// ErrInvalidDefinition: the Definition itself is wrong (no group or kind,
	// no version, two storage versions, a version named twice, a nil CRD).
	ErrInvalidDefinition = errors.New("crd: invalid definition")
	// ErrUnsupportedType: a Go type that no OpenAPI schema describes (chan,
	// func, complex, an interface, a map with non-string keys, a recursive
	// type, a struct whose fields JSON cannot see). The error is a *TypeError.
	ErrUnsupportedType = errors.New("crd: Go type has no schema")
	// ErrUnknownPath: an option names a JSON path that is not in the schema.
	// The error is a *PathError.
	ErrUnknownPath = errors.New("crd: no such path in the schema")
	// ErrInvalidValue: an option does not fit the schema at its path (a
	// minimum on a string, a default of the wrong type, a pattern that does not
	// compile). The error is a *PathError.
	ErrInvalidValue = errors.New("crd: invalid value for the schema")
	// ErrSchemaSource: the server's OpenAPI document could not be read or has
	// no definition for an embedded Kubernetes API type.
	ErrSchemaSource = errors.New("crd: schema source")
	// ErrNamesNotAccepted: the server refused the CRD's names (a plural or kind
	// already taken); the error carries the server's reason and message.
	ErrNamesNotAccepted = errors.New("crd: names not accepted")
)

// TypeError says which Go field of which type cannot be expressed as a
// schema, and why. It matches ErrUnsupportedType.
type TypeError struct {
	// Path is the Go field path from the root type, such as
	// "CronJob.Spec.Callbacks".
	Path string
	// Type is the Go type that has no schema.
	Type reflect.Type
	// Reason says why.
	Reason string
}

// Error says the Go field path, the type and why it has no schema.
func (e *TypeError) Error() string {
	return fmt.Sprintf("crd: %s (%v): %s", e.Path, e.Type, e.Reason)
}

// Is makes errors.Is(err, ErrUnsupportedType) true.
func (e *TypeError) Is(target error) bool { return target == ErrUnsupportedType }

// PathError says which option, at which JSON path of which version's schema,
// is wrong. Err is ErrUnknownPath or wraps ErrInvalidValue.
type PathError struct {
	// Version is the CRD version whose schema it is.
	Version string
	// Path is the JSON path the option named, such as ".spec.schedule".
	Path string
	// Err says what is wrong.
	Err error
}

// Error says the version, the JSON path and what is wrong there.
func (e *PathError) Error() string {
	return fmt.Sprintf("crd: version %s, %s: %v", e.Version, e.Path, e.Err)
}

// Unwrap returns Err, so that errors.Is matches ErrUnknownPath or ErrInvalidValue.
func (e *PathError) Unwrap() error { return e.Err }

// invalid returns an error wrapping ErrInvalidValue with a message.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidValue, fmt.Sprintf(format, args...))
}

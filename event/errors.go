package event

import "errors"

// ErrNilObject is returned, wrapped, when a nil object reaches a key function.
var ErrNilObject = errors.New("nil object")

// ErrNoName is returned, wrapped, when an object has no name and so cannot have a key.
var ErrNoName = errors.New("object has no name")

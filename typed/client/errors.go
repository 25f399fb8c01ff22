package client

import "errors"

// ErrNilObject is wrapped by a call of a Dynamic's Get, Create, Update, UpdateStatus,
// Patch, Apply or ApplyStatus whose dynamic client answered with a nil object and no error: there is no state
// to convert, and going on from the caller's own copy could act on a state the server
// never had. It is the write side's error too: write.ErrNilObject is this same variable,
// so that errors.Is finds it whether a writer or this adapter saw the nil. (A nil from
// the dynamic client's List or Watch is reflect.ErrNilResult, the reflector's error for a
// ListerWatcher that answers nil.)
var ErrNilObject = errors.New("the client returned a nil object")

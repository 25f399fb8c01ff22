package controller

import "errors"

// ErrNilArgument is returned, wrapped with what was nil, by every constructor, method and
// function of this module given a nil (or typed-nil) argument it needs: a nil
// reconciler, source, mapping, predicate, client or function. One sentinel for the whole
// module, so that errors.Is(err, controller.ErrNilArgument) finds any of them.
var ErrNilArgument = errors.New("nil argument")

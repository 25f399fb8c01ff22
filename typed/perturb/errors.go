package perturb

import "errors"

// ErrInvalid is wrapped by the errors of options and arguments Check refuses (a nil
// Controller, a step without Do, a nil Definition, a negative bound) and of requests the
// in-memory API server cannot serve (a kind it does not know).
var ErrInvalid = errors.New("perturb: invalid argument")

// ErrReference is wrapped when an unperturbed run fails: nothing can be compared with it.
var ErrReference = errors.New("perturb: the reference run failed")

// ErrNondeterministic is wrapped when two unperturbed runs end in different states: the
// fields that differ are to be marked in Options.Nondeterministic, or every perturbed run
// would be a false alarm.
var ErrNondeterministic = errors.New("perturb: two unperturbed runs ended differently")

// ErrControllerPanic is wrapped by the error of a controller process that panicked.
var ErrControllerPanic = errors.New("perturb: the controller panicked")

// ErrNoStop is wrapped when a controller process does not return after its context ended.
var ErrNoStop = errors.New("perturb: the controller did not stop")

// ErrNoSettle is wrapped when the cluster keeps changing for StepTimeout after a step.
var ErrNoSettle = errors.New("perturb: the controller did not settle")

// ErrReturned is wrapped when a controller process returns before its context ended.
var ErrReturned = errors.New("perturb: the controller returned before it was stopped")

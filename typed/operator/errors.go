package operator

import "errors"

// ErrNoConfig is returned, wrapped, by Flags.Config when no source of a Kubernetes
// client configuration is found or usable; the error names every source tried and why
// each failed.
var ErrNoConfig = errors.New("no Kubernetes client configuration")

// ErrFlag is returned, wrapped, by Flags.Options and Run when one of the operator's flags
// could not be registered (its name was taken on the flag set: its value would not be
// the operator's), or when a flag's value is invalid.
var ErrFlag = errors.New("operator flag")

// ErrSignal is wrapped, with the signal's name, by the cause (context.Cause) of
// SignalContext's context once a shutdown signal arrived.
var ErrSignal = errors.New("shutdown signal received")

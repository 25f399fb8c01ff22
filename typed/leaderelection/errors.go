package leaderelection

import "errors"

// ErrNoIdentity is returned by Run when Config.Identity is empty.
var ErrNoIdentity = errors.New("leader election needs an identity")

// ErrNoClient is returned by Run when Config.Client is nil.
var ErrNoClient = errors.New("leader election needs a Lease client")

// ErrLeaseDuration is returned, wrapped, by Run when Config.LeaseDuration is not
// a whole number of seconds.
var ErrLeaseDuration = errors.New("lease duration must be a whole number of seconds")

// Package guard holds the library's own guards at its public boundaries (DESIGN 18: bad
// input is a reported error, never a panic): IsNil tells a nil or typed-nil value in an
// interface, which a comparison with nil misses; LogPanic keeps a user's callback, called
// on one of the library's goroutines where nothing else would recover, from ending the
// process, and Metrics does the same for every call of a user's metrics sink, of any
// interface of the family; Leases makes a Lease client that answers neither a Lease nor
// an error an error (ErrNoLease), for leader election and sharding. It is the only
// internal package the library itself imports.
package guard

package manager

import "errors"

// ErrAlreadyCompleted is returned by Builder.Complete when it is called a second time.
var ErrAlreadyCompleted = errors.New("builder already completed")

// ErrNoOwnerKind is returned, wrapped, by Builder.Complete for a Builder with owned kinds
// (Owns) whose primary kind is not known: a custom resource's Go struct, or
// *unstructured.Unstructured, given no Builder.WithKind.
var ErrNoOwnerKind = errors.New("the owner kind is unknown")

// ErrReleased is returned by the methods of a Cache whose Release has been called,
// WaitForSync included when Release is called while it waits.
var ErrReleased = errors.New("cache released")

// ErrNoResource is returned, wrapped, by Acquire for a Source of *unstructured.Unstructured
// or *metav1.PartialObjectMetadata without a Resource: caches of two resources would be
// shared.
var ErrNoResource = errors.New("the source names no resource")

// ErrNotStarted is what Cache.Err says of a cache whose Manager does not run (yet): its
// controllers start when the Manager runs, and until then it holds nothing and does not
// sync. A program that reads a cache, or runs a loop over one (such as a shard.Loop),
// without running its Manager waits for ever; this names why.
var ErrNotStarted = errors.New("the cache has not started: its Manager does not run")

// ErrScope is returned, wrapped, by Acquire for namespaces that name no scope: "" among
// other namespaces, or any namespace for a cluster-scoped Source.
var ErrScope = errors.New("invalid namespace scope")

// ErrConflictingOptions is returned, wrapped, by Acquire (and For, Owns and Watches) for
// parts of one user's CacheOptions that set the same field to different values, or give
// an index name twice: which one was meant cannot be told, and neither is dropped in
// silence.
var ErrConflictingOptions = errors.New("conflicting cache options")

// ErrStopped is returned by Add, NewLoop and Loop.AddTrigger once the Manager is shutting
// down (its runnables stopping); by Acquire and Related once it is shutting down its
// caches, or has stopped; by Loop.Enqueue once it is shutting down (wrapped with
// context.Canceled, so that a reconcile or trigger that returns it is seen as
// interrupted, not failed); and by Cache.WaitForSync when the Manager stops the cache it
// waits for.
var ErrStopped = errors.New("manager stopped")

// ErrShutdownTimeout is returned by Run, wrapped with what was still running, when
// runnables or caches did not stop within Options.ShutdownTimeout.
var ErrShutdownTimeout = errors.New("shutdown timed out")

// ErrResourceNotServed is wrapped by the error of a cache whose resource the server does
// not serve: a list or watch of it was answered 404 Not Found, as for a custom resource
// whose CustomResourceDefinition was deleted or is not installed yet. See Cache.Err.
var ErrResourceNotServed = errors.New("resource not served")

// ErrInvalidKey is returned, wrapped, by Enqueue and Loop.Enqueue for a key that names no
// object the Loop reconciles: one without a name, of a namespace outside the Loop's cache,
// with a namespace for a cluster-scoped kind, or without one for a namespaced kind (but
// for the key of an object the cache holds: a Source not declared ClusterScoped). It is
// reported, wrapped, for such a key from a Related mapping, which is dropped.
var ErrInvalidKey = errors.New("invalid key")

// ErrNotInReconcile is returned by Enqueue for a context that is not the context of a
// reconcile of a Loop of a Manager.
var ErrNotInReconcile = errors.New("the context is not a reconcile's")

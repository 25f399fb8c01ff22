// Package write is the write side of a controller: what a reconciler writes to the API
// server, conflict-safe, never from a stale copy, and never over another controller's
// object.
//
//   - StatusWriter writes an object's status through the status subresource, only when
//     it changed, retrying conflicts on a fresh read.
//   - Owned creates or updates an object the reconciled one controls (its controller
//     reference set), writing nothing when it is already as it should be, and refusing an
//     object controlled by another owner (OwnerConflictError, ErrControlledByOther).
//     WithCache reads the owned object from a cache first.
//   - Finalizer adds a finalizer to live objects and, once one is being deleted, runs
//     its cleanup and removes the finalizer, so that no deletion is missed even while no
//     replica runs.
//   - Recorder writes Events through events.k8s.io/v1, as client-go's tools/events does.
//
// Each writer takes its client as a function from a namespace to a client of that
// namespace, because generated clients are per namespace: a generated client's method
// value such as clientset.AppsV1().Deployments is one as it is,
// client.FromDynamicNamespaced makes one for a custom resource's Go struct, and
// ClusterScoped one for a cluster-scoped kind. The client types are small interfaces
// (Getter, Patcher, StatusUpdater, CreateUpdater) that generated clients and
// *client.Dynamic[T] satisfy with no adapter, and from which Go infers the object type.
//
// A writer remembers the last object it wrote (bounded in number and age) so that a copy
// older than its own write, from a cache that has not caught up, is never written back:
// it reads the server instead. A write to an object deleted and created again under the
// same name is ErrGone. Failed writes are WriteErrors naming the verb and the object;
// nil arguments are errors wrapping controller.ErrNilArgument (controller.ErrNilArgument);
// a client that answers a nil object and no error gives ErrNilObject.
package write

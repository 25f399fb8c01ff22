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
//   - Applier writes by server-side apply (NewApplier; NewStatusApplier through the
//     status subresource), and OwnedApplier applies objects with the controller reference
//     to their owner, refusing another controller's object. Owned.CreateOnly creates an
//     owned object whose spec must never change (a Job, a PersistentVolumeClaim) and
//     never updates it.
//
// # Server-side apply
//
// An apply states the fields its field manager owns; the server merges them with the
// other managers' fields and remembers who owns what (metadata.managedFields), so that
// a controller and an autoscaler, say, share one Deployment without reverting each
// other. Two kinds of intent are applied, with no code generation:
//
//   - For a built-in kind, client-go's apply configurations, through the generated
//     client as it is: NewApplier(clientset.AppsV1().Deployments) applies
//     *appsv1ac.DeploymentApplyConfiguration values. Only what the With methods set is
//     sent.
//   - For a custom resource, its own Go struct, through client.FromDynamicNamespaced's
//     client: NewApplier(client.FromDynamicNamespaced[*Website](dyn.Resource(gvr))).
//   - For a built-in kind, as a convenience, its own Go struct too, through Structs:
//     NewApplier(Structs(clientset.AppsV1().Deployments)) applies *appsv1.Deployment
//     values, converted to apply configurations by the rules below.
//
// A Go struct's intent: the caller fills a new struct with only what it owns, its
// apiVersion and kind (TypeMeta), name and namespace. What is sent is the struct's JSON
// with every null and every empty object removed, recursively (client.Intent): unset
// pointers, nil maps and slices, and structs with nothing set (metadata.creationTimestamp,
// an omitempty status) are not sent, so they are not claimed. The zero value of a scalar
// field without omitempty is sent, and claimed: by Kubernetes convention such a field is
// required (a CRD schema generated from the struct marks it so), so an intent always
// states it. Give an optional field omitempty, or make it a pointer, to leave it out
// when unset. With
//
//	type WebsiteSpec struct {
//		Message  string `json:"message"`            // required
//		Replicas *int32 `json:"replicas,omitempty"` // optional
//	}
//
// the intent &Website{TypeMeta: websiteMeta, ObjectMeta: metav1.ObjectMeta{Namespace:
// "web", Name: "shop"}} is
//
//	{"apiVersion": "examples.typedinformer.io/v1", "kind": "Website",
//	 "metadata": {"name": "shop", "namespace": "web"}, "spec": {"message": ""}}
//
// which claims the message (as empty) and leaves the replicas to whoever sets them. A
// status applier (NewStatusApplier) sends only the struct's apiVersion, kind, name,
// namespace and status.
//
// The field manager is named once: a manager.Manager carries its Options.FieldManager
// (by default the program's name) to everything it runs through the context
// (WithFieldManager); a writer's own (Applier.WithFieldManager) wins. With none, an apply
// fails with ErrNoFieldManager rather than guess a name that may be another program's.
// Without force (WithForce), an apply that sets a field another manager owns with
// another value fails with an *ApplyConflictError naming each field and its manager
// (errors.Is ErrApplyConflict), and writes nothing.
//
// Each writer takes its client as a function from a namespace to a client of that
// namespace, because generated clients are per namespace: a generated client's method
// value such as clientset.AppsV1().Deployments is one as it is,
// client.FromDynamicNamespaced makes one for a custom resource's Go struct, and
// ClusterScoped one for a cluster-scoped kind. The client types are small interfaces
// (Getter, Patcher, StatusUpdater, OwnedClient, ApplyClient, StatusApplyClient,
// OwnedApplyClient) that generated clients and
// *client.Dynamic[T] satisfy with no adapter, and from which Go infers the object type.
//
// A writer remembers the last object it wrote (bounded in number and age) so that a copy
// older than its own write, from a cache that has not caught up, is never written back:
// it reads the server instead. Appliers remember nothing: an apply compares nothing
// before it writes (the server computes the change, and an apply that changes nothing
// writes nothing). Every successful write, applies included, is recorded for the
// reconcile (consistency.Wrote). A write to an object deleted and created again under the
// same name is ErrGone. Failed writes are WriteErrors naming the verb and the object;
// nil arguments are errors wrapping controller.ErrNilArgument (controller.ErrNilArgument);
// a client that answers a nil object and no error gives ErrNilObject.
package write

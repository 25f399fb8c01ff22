// Package client makes Kubernetes clients sources of typed objects with no code
// generation, and the write side's clients for custom resources:
//
//   - A generated clientset's typed client (clientset.CoreV1().Pods(ns)), the dynamic
//     client (as *unstructured.Unstructured) and the metadata client (as
//     *metav1.PartialObjectMetadata) are controller.ListerWatchers as they are.
//   - FromDynamic reads a custom resource through the dynamic client as the user's own Go
//     struct T, converted with runtime.DefaultUnstructuredConverter, with List[T] as its
//     list type; a *Dynamic[T] also gets, creates, updates, updates the status of and
//     patches T, so that package write works on a custom resource's struct.
//     FromDynamicNamespaced gives it per namespace, as the write side takes its clients.
//     ForResource (or FromREST, over a REST client of one's own) gives the same
//     *Dynamic[T] per namespace, but lists and watches with a REST client and decodes the
//     server's JSON straight into T, as a generated client does, a list item by item as
//     it arrives: no map[string]interface{}, no conversion; it is the way to cache a
//     custom resource, FromDynamic costing about twice the CPU and memory.
//     It also applies T by server-side apply (Apply, ApplyStatus), sending Intent(obj):
//     the struct's JSON without nulls and empty objects, so that fields left unset are
//     never claimed.
//   - Selectors narrows any source on the server; StripManagedFields is a ready transform
//     that drops managedFields before objects are cached, often most of their size, and
//     InternStrings one that makes the strings cached objects repeat (labels, namespaces,
//     owner references, image names) share one copy. A Manager's caches apply both by
//     default, and over a *Dynamic[T] they read through Dynamic.WithoutManagedFields,
//     which does not even decode managedFields.
//   - New returns a new, empty object of a type T.
//
// Errors: a nil client or object to write is an error wrapping
// controller.ErrNilArgument; a nil object from the dynamic client's Get or a write is
// ErrNilObject (write.ErrNilObject, the same variable), and a nil list or watch
// reflect.ErrNilResult; an object that does not convert (or decode) is reported, wrapped, naming it,
// and a list with some such objects is an error wrapping reflect.ErrIncompleteList, with
// the objects that did convert.
package client

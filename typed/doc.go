// Package typed builds codegen-free typed controllers on top of package controller:
//
//   - Sources: a generated clientset's typed client (clientset.CoreV1().Pods(ns)), the
//     dynamic client (as *unstructured.Unstructured, or converted to your own Go struct
//     with FromDynamic and List, with no code generation), and the metadata client (as
//     *metav1.PartialObjectMetadata) are all ListerWatchers. Selectors narrows any of them.
//   - StripManagedFields, a ready transform that drops managedFields before objects are
//     cached, which is most of many objects' size.
//   - Loop: a level-driven reconciler on client-go's typed workqueue. Events enqueue the
//     keys the controller computed; N workers reconcile them; a worker gets the freshest
//     cached object, or for a deleted object a not-found request carrying its last known
//     state; a reconcile returns done, requeue-after, an error (retried with capped
//     exponential backoff, never given up on unless Options.MaxRetries sets a cap) or a
//     Terminal error (not retried, and what an earlier reconcile scheduled is cancelled).
//     A key is never reconciled by two workers at once, only one Run runs at a time, and
//     shutdown lets in-flight reconciles finish. Reconcile errors are logged at error
//     level, and the reconciler's context logger carries the loop's name and the key.
//   - Related: events of a secondary kind mapped to primary keys, with OwnerKeys (owner
//     references) as the ready mapping.
//   - LeaderElection: run reconcilers only while holding a Lease, through client-go's
//     leaderelection, releasing it only once they have returned, so that two replicas
//     never reconcile at once.
//
// The caches keep running on every replica, so a new leader starts warm and reconciles
// every key it finds at once.
package typed

// Package typed is the reconcile contract and its loop, on top of package controller:
// Request, Result, Reconciler and Terminal; the Loop over any Source; Related. Its
// neighbours hold the rest: typed/predicate (event filters), typed/client (codegen-free sources),
// typed/write (status, owned objects, finalizers, Events), typed/leaderelection (work
// only while holding a Lease), typed/manager (shared caches, the builder, loops run while
// leading) and typed/shard (sharding across replicas).
//
//   - Loop: a level-driven reconciler with client-go's rate limiters, over any Source[T]
//     (a handler registration and Get: a controller.Controller, a manager.Cache of one
//     namespace or several, a shard's cache). NewLoop refuses a nil source, reconciler
//     or predicate with an error, as controller.New refuses its mistakes, so that Run
//     starts only what can run. Events enqueue the keys the source computed; N workers reconcile them; a worker gets the freshest
//     cached object, or for a deleted object a not-found request carrying its last known
//     state; a reconcile returns done, requeue-after, an error (retried with capped
//     exponential backoff, never given up on unless Options.MaxRetries sets a cap) or a
//     Terminal error (not retried, and what an earlier reconcile scheduled is cancelled).
//     A key is never reconciled by two workers at once, only one Run runs at a time, and
//     shutdown lets in-flight reconciles finish. Reconcile errors are logged at error
//     level, and the reconciler's context logger carries the loop's name and the key.
//     Keys of live watch changes are reconciled before those of the initial list,
//     relists and resyncs, so a startup list of any size delays a live change by at most
//     one reconcile per worker; list keys still get one reconcile in every nine while
//     live changes keep coming. client-go's workqueue has no priorities, so the Loop has
//     its own queue with the workqueue's contract, and keeps client-go's rate limiters.
//   - Predicates (package typed/predicate) are the trailing arguments of NewLoop and
//     Related, applied before a key is enqueued. They are arguments rather than a field
//     of Options: Options is not generic, and making it generic would make every caller
//     spell the object type that NewLoop infers from its source and reconciler.
//   - Parts: a Source whose keys are held in parts that come and go (the shards of
//     package typed/shard) makes one Loop serve them all; a part given up is handed
//     over with HandOver, which reconciles the part's deletions before its holder lets
//     it go, and Forget.
//   - Related: events of a secondary kind mapped to primary keys, with OwnerKeys (owner
//     references) as the ready mapping.
//   - Read your own writes (on by default; Options.DisableReadYourWrites): a reconcile's
//     writes, recorded through its context (package typed/consistency; the writers of
//     typed/write do it), park its key, holding no worker and growing no backoff, until
//     every Consistent source's cache that holds or selects the written object has
//     applied them; a wait past Options.StaleBound is logged, counted
//     (ConsistencyMetrics) and answered by asking the cache for a bookmark. Each Run, and
//     each part that joins (Fence), first waits until the caches have reached a
//     consistent read taken as it starts, so a new leader never acts on a cache older
//     than the previous one's writes.
//
// The caches keep running on every replica, so a new leader starts warm; it reconciles
// every key it finds once its caches have passed the fence.
package typed

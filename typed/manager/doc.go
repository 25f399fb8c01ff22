// Package manager runs a controller program: shared typed caches, reconcile loops and the
// program's own runnables, with leader election, health probes and a graceful shutdown.
// It is controller-runtime's Manager and cache, typed.
//
// # Shared caches
//
// Within a Manager, every handler, loop and reader that asks for the same object type,
// namespace scope, label and field selectors and transform shares one list+watch and one
// cache (one controller.Controller). Acquire returns a handle on it and Release gives the
// handle back; a cache starts on first use and stops, leaving no goroutine, when its last
// handle is released:
//
//	pods := manager.Namespaced[*corev1.Pod](clientset.CoreV1().Pods)
//	cache, err := manager.Acquire(m, pods, manager.CacheOptions[*corev1.Pod]{Namespaces: []string{"a", "b"}})
//	defer cache.Release()
//	pod, ok := cache.GetByName("a", "web-0") // a *corev1.Pod
//
// A scope of several namespaces is one controller per namespace, each shared with every
// other cache of that namespace, behind a handle that reads them as one store, with the read API
// of a controller's Store (eventcache.Reader: Get, List, ByIndex, ByIndexIn for one
// namespace, ...), and calls a handler one event at a time,
// with one controller.Registration for all. Objects are shared: never modify one.
//
// The registry is the process's: sharded loops (package shard) acquire their shards'
// caches from it too, a shard's selector being part of the key (Source.Subset), so one
// (type, scope, selectors, transform) is one watch in the whole process.
//
// Go has no generic methods, so the Manager is one untyped registry and the typed entry
// points are functions: Acquire, NewLoop, Related. Their type arguments are inferred from
// the Source, which is written once per resource; only Namespaced and ClusterScoped name
// the object type, and they infer the list type from the client. A handle names the
// object type only (Cache[T], Loop[T], Builder[T]): the list type stays in the Source,
// which makes the ListerWatchers, and a Cache is a typed.Source[T] (handler registration
// and Get), all that typed.Loop and typed.Related consume. Owns and Watches take cache
// options through Source.With, indexes included.
//
// What a cache holds costs as little memory as the Manager can make it by default: it
// drops managedFields and makes the strings objects repeat share one copy
// (client.StripManagedFields, then client.InternStrings, before CacheOptions.Transform);
// Options.KeepManagedFields and Options.NoStringInterning turn either off. It streams
// initial lists with the watch-list protocol instead of paging them, falling back to
// paged lists where the server or the client cannot serve it (client-go's fakes say so);
// Options.NoWatchList pages them always.
//
// A transform is a function, which Go cannot compare: CacheOptions.TransformName
// identifies it, and a cache whose transform has no name is shared with nobody. Indexes
// are not part of the key: an Acquire that asks for an index the shared cache lacks adds
// it, even while the cache runs (the cached objects are indexed at once, atomically), so
// each user asks for the indexes it reads. An index name is the cache's, and names one
// index for every handle: Go cannot compare functions, so name an index after what it
// computes.
//
// # Resources that go away
//
// A cache of a custom resource whose CustomResourceDefinition is deleted (or not
// installed yet) does not retry forever: the first list or watch answered 404 Not Found
// stops it, with one error logged naming the cache and the resource. It keeps what it
// holds (the objects deleted with the CRD were delivered as deletions), makes no request,
// reports ErrResourceNotServed through Cache.Err, Cache.WaitForSync and /readyz, and
// waits for the resource to be served again: it watches its CRD when
// Options.CustomResourceDefinitions is set and its Source names a GroupVersionResource
// (Dynamic does), and checks with one list at a time on Options.ResourceBackoff's slow
// schedule in any case. Then it relists and carries on: its handlers and loops receive
// the objects listed as additions.
//
// The cache keeps its one controller throughout, holding its requests while the
// resource is not served, rather than stopping it and starting another: a
// controller.Controller runs once, and a typed.Loop and typed.Related are bound to the
// handlers they registered, so a new controller would drop the loops' queues and need every handler
// and loop registered again, while a relist on the same controller delivers the new
// objects as additions, and as deletions any that vanished unseen. Its Run context is
// cancelled only when the cache stops: on its last Release, or when the Manager stops,
// which end the wait too, leaving no goroutine.
//
// # Keys from outside the cluster
//
// Besides the events of its caches, a Loop reconciles the keys enqueued by hand:
// Loop.Enqueue from anywhere, Enqueue(ctx, key) from one of its reconciles (whose
// context carries the Loop), and those of a Trigger (a function, or Channel) that the
// Manager runs with the Loop, while this replica leads:
//
//	loop.AddTrigger("webhook", manager.Channel(keys))
//
// An enqueued key has the priority of a live change, and a key enqueued again while it
// waits is reconciled once. Keys enqueued while the Loop does not run wait for it.
//
// # The Manager
//
// Run serves /healthz and /readyz, runs the caches on every replica (standbys stay warm),
// and runs loops (NewLoop) and runnables (Add) only while this replica holds the Lease of
// Options.LeaderElection (leaderelection.Config, which releases it only once they have
// returned). Runnables marked EveryReplica run on every replica. /readyz passes once every
// cache a loop needs has synced. A runnable's error or panic stops the Manager, and Run
// returns it. Shutdown stops the loops from taking keys, lets in-flight reconciles finish,
// then stops the caches, within Options.ShutdownTimeout.
//
// The field manager of server-side applies is named once, in Options.FieldManager (the
// program's name by default, the same on every replica): the context of every runnable
// and reconcile carries it (write.WithFieldManager), so write.Applier and
// write.OwnedApplier need not be told.
//
// # Metrics
//
// Options.Metrics receives the counters and gauges of every cache and loop (Metrics);
// Options.MetricsAddress and MetricsHandler serve them at /metrics on every replica
// while Run runs, with the probes' server plumbing, optionally behind the API server's
// authentication and authorization (Options.MetricsAuth: TokenReview, then
// SubjectAccessReview of GET on the non-resource URL /metrics) and with pprof
// (Options.Pprof). The Manager imports no metrics library: the Prometheus adapter,
// module github.com/typedinformer/typedinformer/typed/metrics/prometheus, gives both the
// sink and the handler, with controller-runtime's metric names.
//
// # Webhooks
//
// Options.Webhook, a typed/webhook Server with its admission and conversion webhooks
// registered (webhook.For[T](srv)...Complete(), controller-runtime's
// NewWebhookManagedBy), is run on every replica, from before the caches and runnables
// start until after they stopped, and /readyz waits for it.
//
// Unlike controller-runtime's, a Manager that loses leadership does not exit: its loops
// stop, it stays a warm standby, and it campaigns again; its loops and leader runnables
// run once per term.
package manager

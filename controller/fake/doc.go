// Package fake provides a scriptable, in-memory ListerWatcher for users' unit tests.
//
// It is a test fake: use it in unit tests of code that lists and watches (reflectors,
// informers, controllers) instead of a real API server. It is not meant for production use.
//
// Unlike client-go's fake clientset, which ignores resource versions and hangs when asked
// for a watch-list stream, [ListerWatcher] honours the list/watch protocol the way a real
// kube-apiserver does, so that code which relies on it can be tested against it:
//
//   - Resource versions: one increasing integer counter, like etcd's revision. Every
//     Create, Update and Delete bumps it and stamps the object; lists carry the resource
//     version they were read at. Objects go in and come out as deep copies.
//   - List: resourceVersion "" and "0" (current state), "N" with resourceVersionMatch unset
//     or NotOlderThan, and "N" with Exact (the state as it was at N); limit and continue
//     paging over a consistent snapshot; label selectors and the metadata.name and
//     metadata.namespace field selectors; items sorted by namespace/name.
//   - Watch: from a resource version N, a replay of every change after N, in order, then
//     live changes; from "" and "0", as on the server, a synthetic ADDED event for every
//     existing selected object first (sorted by key, with no bookmark after them), then
//     live changes; selectors applied like the server does (an update that moves an
//     object out of the selector arrives as DELETED, one that moves it in as ADDED);
//     bookmarks only when allowWatchBookmarks is set, and then, as kube-apiserver's watch
//     cache does, one 2 s before a watch's timeoutSeconds; timeoutSeconds; watch-list
//     (sendInitialEvents=true) with the "k8s.io/initial-events-end" bookmark.
//   - Compaction: a resource version older than the compaction point gets 410 Gone
//     (reason Expired) from List with Exact and from a continue token, and a watch that
//     sends one ERROR event and closes, exactly as the real server does.
//   - Request validation: the same invalid combinations of resourceVersion,
//     resourceVersionMatch, sendInitialEvents and continue that the server rejects are
//     rejected with the same kind of error.
//
// On top of that a test can script faults: compaction, failing the next lists or watches,
// ending every open watch, sending bookmarks or arbitrary raw events, and it can wait for
// watches to be opened instead of sleeping.
//
// Known differences from a real API server, chosen to keep tests deterministic:
//
//   - A request for a resource version newer than the current one fails at once with the
//     server's "Too large resource version" error instead of waiting a few seconds for it.
//   - limit counts matching items: a page holds exactly limit items while more match.
//   - There is no admission, defaulting, generateName, finalizers or graceful deletion.
package fake

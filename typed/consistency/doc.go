// Package consistency records, for the key being reconciled, the writes a reconcile makes,
// so that the reconcile loop does not reconcile that key again until the caches it reads
// have caught up with them: read-your-writes.
//
// A reconcile that acts on a cache older than its own last write repeats a create the
// cache does not show yet, computes a status from before its last status write, or cleans
// up an object already replaced. The Loop (typed.Loop) therefore puts a Recorder in each
// reconcile's context; the library's writers (package write) report every successful
// write to it, and a reconciler that writes through a client of its own reports its
// writes with one call of Wrote or Deleted. Outside a reconcile, or with the Loop's
// read-your-writes turned off, these calls do nothing.
//
// What is recorded is the object the server returned: its type, namespace, name, UID and
// resourceVersion. The request's own resourceVersion is never recorded, and a write that
// failed records nothing. A deletion whose response carries no object is recorded with
// Deleted: the key waits until the caches no longer hold that object.
package consistency

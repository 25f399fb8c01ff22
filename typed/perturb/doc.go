// Package perturb tests a controller the way systematic testing found the bugs of
// production operators (Sieve, OSDI'22; Acto, SOSP'23): from a plain go test, it runs a
// scenario (a sequence of changes to desired state, as Go code) once unperturbed and
// then again under each perturbation, and compares every run's end state with the
// unperturbed one. A controller whose end state depends on when it crashed, on how stale
// its caches were or on which intermediate states it saw has a bug of the kind that
// unit tests against a well-behaved fake do not find.
//
// The author gives Check (or Test) a Controller, a function that builds and runs one
// process of the controller on the clients and clock of an Env, as its main does, and
// the scenario's Steps. The perturbations:
//
//   - Crash: for each write N the controller made in the unperturbed run (creates,
//     updates, patches and deletions; Leases and Events are not counted), a run where
//     the process stops right after write N succeeded (its context is cancelled and
//     every later request of it fails, so its Lease is not released) and a fresh one
//     starts, with new caches, on the same cluster.
//   - Stale reads: from write N on, the watches of one resource deliver nothing newer
//     until up to a few more changes of it were made (or Options.Window passed), as a
//     lagging watch cache shows them. Lists stay consistent reads, bookmarks report
//     only what was delivered, so the library's read-your-writes (typed, package
//     typed/consistency) waits for what it promises, a key whose own write lags, and
//     masks nothing else.
//   - Unobserved states: before step S, the watches of one resource disconnect; the
//     changes made meanwhile are never delivered, and when the window ends the watches
//     get 410 Gone and their caches relist: only the final state of the burst is seen.
//
// After each step the harness waits until the cluster has not changed for Options.Quiet
// (and a restarted process watches what the first one did, and holds its Lease if the
// first one did). Quiet is not done: a key waiting for a lagging cache, or retried with
// backoff, does nothing for a while, so the next step may come first. A scenario whose
// meaning depends on the controller having acted (a clock stepped past a schedule once
// the previous run started) waits for it in the step; a Failure whose write never came
// (NotReached) points at a Quiet shorter than the controller's reactions.
//
// Each Failure names the perturbation, the write it followed, the seed that replays it
// exactly (Options.Replay) and the diff (go-cmp) of the end states: every object of the
// compared resources, minus what differs between runs whatever the controller does
// (resource versions, UIDs, creation times, generations, managed fields, owner
// references' UIDs, conditions' lastTransitionTime, generated names' suffixes) and the
// fields the author marks in Options.Nondeterministic. The unperturbed run is made twice
// first: if those two differ, Check says which fields are nondeterministic
// (ErrNondeterministic) rather than report a false alarm per run. Runs are bounded
// (Options.Runs, Options.Budget); a scenario with more crash points or windows than fit
// is sampled with Options.Seed, and Report.Skipped counts what the budget left out.
//
// The cluster is an in-memory API server behind client-go's fake clientset and dynamic
// fake (their reactors replaced): unlike client-go's object tracker, it stamps resource
// versions on objects, refuses stale updates with a conflict, counts generations, serves
// the status subresource apart from the rest (an update of the object keeps the stored
// status, a status update changes only the status), keeps an object with finalizers
// until they are removed, names objects from generateName, and serves watches that
// replay from a resource version, send bookmarks and answer a compacted version with
// 410 Gone. Every run starts from an empty cluster and the clock at Options.Start, so a
// seed replays the same perturbation at the same write; the goroutines of the controller
// still interleave as they will, which is why a controller's unperturbed runs must agree.
// It serves neither server-side apply, watch-list, admission, defaulting nor garbage
// collection; a controller that needs them is to be tested against typed/testenv.
//
// Options.Server runs the runs on a real API server instead, such as typed/testenv's,
// each in a namespace of its own (Env.Namespace), the process's requests counted and cut
// at its transport. Its reads are perturbed there too: the bodies of the process's
// watches (asked for in JSON) pass through a gate that, while a window of the same rule
// is open (a few changes made through the run's clients, or Options.Window), holds
// their events back (a lag, bookmarks held with them so that they never report what
// was not delivered) or drops them and, when it closes, ends the watch with a 410 Gone
// event (a disconnection), so its cache relists; lists and gets stay the server's
// consistent reads. A run there costs seconds (a real Lease expiry, a longer Quiet); in
// memory it takes a few hundred milliseconds, so the whole perturbation matrix of a
// scenario fits in a unit test.
package perturb

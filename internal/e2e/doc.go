// Package e2e holds end-to-end tests of the typedinformer pipeline against a real
// kube-apiserver and etcd started by typed/testenv.
//
// Every test starts its own control plane, runs one or more controllers against it,
// changes objects (sometimes while restarting or cutting off processes), and ends with
// the same checks: the controller's known objects equal a fresh list from the server,
// every handler saw a consistent sequence of events that adds up to the server's state,
// and no goroutine outlives the controller.
//
// Package typed's parts are tested here too: sources narrowed by selectors (typed clients,
// the metadata client, a CRD as a hand-written Go struct), Loop, Related, the
// managedFields transform and LeaderElection with two replicas. Three of those tests guard
// against bugs they found: the Lease released while lead still ran
// (TestLeaderElectionReleasesTheLeaseOnlyAfterLeadReturns), queued keys reconciled after
// the loop's context ended (TestLoopStartsNoReconcileAfterItsContextEnds) and a goroutine
// left by a stopped dynamic watch (TestDynamicWatchStopEndsItsGoroutine).
//
// The tests need the etcd and kube-apiserver binaries in .cache/bin (`make controlplane`).
package e2e

// Package e2e holds end-to-end tests of the typedinformer pipeline against a real
// kube-apiserver and etcd started by internal/controlplane.
//
// Every test starts its own control plane, runs one or more controllers against it,
// changes objects (sometimes while restarting or cutting off processes), and ends with
// the same checks: the controller's known objects equal a fresh list from the server,
// every handler saw a consistent sequence of events that adds up to the server's state,
// and no goroutine outlives the controller.
//
// The tests need the etcd and kube-apiserver binaries in .cache/bin (`make controlplane`).
package e2e

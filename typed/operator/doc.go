// Package operator is what every operator's main repeats, in a few calls: the usual
// flags, the client configuration, leader election's namespace and identity in a pod,
// and running a Manager until the process is told to stop, with a graceful shutdown.
//
//	func main() {
//		flags := operator.Register(flag.CommandLine, operator.Defaults("website-operator"), operator.WithKlog)
//		flag.Parse()
//		operator.Main(flags, func(cfg *rest.Config, opts manager.Options) (*manager.Manager, error) {
//			m := manager.New(opts) // add Metrics and MetricsHandler, InstallCRDs, ... to opts first
//			// ... manager.For(m, ...).Complete(reconciler)
//			return m, nil
//		})
//	}
//
// Register registers the flags (-kubeconfig, -metrics-bind-address, -metrics-auth,
// -health-probe-bind-address, -leader-elect, -leader-election-namespace, -identity, and
// klog's when asked) with the defaults of a deployed operator (Defaults: leader election
// on, metrics on :8080, probes on :8081). Flags.Config finds the client configuration in
// controller-runtime's order (-kubeconfig, $KUBECONFIG, the pod's service account,
// ~/.kube/config), and Flags.Options gives the Manager's options the flags say, with
// the Lease's namespace and a unique identity derived in a pod. Run does both, builds
// the program's Manager with them, and runs it until SIGTERM or SIGINT (SignalContext);
// a second signal exits at once. Run returns its errors; Main, for a main, logs one and
// exits 1. Nothing else in the package exits the process.
//
// In a cluster, the program's service account needs, besides what its loops read and
// write: get, create and update on leases (coordination.k8s.io) in the Lease's namespace
// with leader election on, and create on tokenreviews (authentication.k8s.io) and
// subjectaccessreviews (authorization.k8s.io) with -metrics-auth.
//
// Run's Manager is the program's: the package does not choose a metrics library (the
// Prometheus adapter is module
// github.com/typedinformer/typedinformer/typed/metrics/prometheus), nor what the Manager
// runs.
package operator

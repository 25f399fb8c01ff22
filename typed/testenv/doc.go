// Package testenv runs a real Kubernetes control plane, etcd and kube-apiserver as
// separate local processes, for end-to-end tests of controllers: the role
// controller-runtime's envtest plays, with the binaries built from Go modules instead
// of downloaded. In a module that requires typedinformer:
//
//	go run github.com/typedinformer/typedinformer/typed/testenv/setup   # once: builds the binaries into a cache
//	env := testenv.Start(t, testenv.Options{CRDPaths: []string{"config/crd"}})   // in a test; stopped when it ends
//	client := kubernetes.NewForConfigOrDie(env.AdminConfig())
//
// # What an Environment is
//
// [Start] (or [StartContext], for TestMain and programs) starts etcd and kube-apiserver
// on free 127.0.0.1 ports, in a temporary directory of their own, with a freshly
// generated certificate authority, serving certificate and client certificates, and
// returns once the apiserver is ready and the CRDs of [Options] are served. A test
// usually starts one and shares it between subtests: starting takes a few seconds.
//
//   - Clients: [Environment.AdminConfig] is a *rest.Config for a member of
//     system:masters, which may do anything. The apiserver authorizes with RBAC:
//     [Environment.UserConfig] is a user, in groups of your choice, with no permissions
//     beyond the RBAC defaults (discovery), for tests of what a controller may and may
//     not do; [Environment.Grant] gives it permissions and returns once they apply.
//   - CRDs: [Environment.InstallCRDs] installs apiextensionsv1.CustomResourceDefinition
//     values, [Environment.InstallCRDFiles] and [Environment.InstallCRDYAML] YAML or
//     JSON ([ParseCRDs] and [ReadCRDFiles] parse them strictly, and say which document
//     of which file is wrong); each returns once every CRD is established and its
//     versions are listed by discovery, so the next request can use them.
//   - Webhooks: [NewWebhookCertificates] writes a CA-signed serving certificate for
//     127.0.0.1 and localhost to a directory a test's webhook server (typed/webhook)
//     reads, Listen gives the server a port on 127.0.0.1, and Rotate replaces the
//     certificate; [Environment.InstallWebhooks] installs webhook
//     configurations and CRDs with conversion webhooks pointing at that server, with
//     the CA bundle, and returns once the API server calls them, so that the next
//     request goes through them.
//   - Faults: [Environment.StopAPIServer], [Environment.StartAPIServer],
//     [Environment.RestartAPIServer], [Environment.StopEtcd], [Environment.StartEtcd]
//     and [Environment.RestartEtcd] stop and start each process, keeping its port, data
//     and certificates; [Environment.CompactEtcd] expires old resource versions, so that
//     watches from them fail with 410 Gone.
//   - Clean-up: [Start] registers [Environment.Stop] with t.Cleanup. Stop returns once
//     both processes have exited and been reaped, and removes the directory; when no
//     other Environment runs, no goroutine of this package is left either. On Linux the
//     processes are also killed if the test binary dies.
//
// # The binaries
//
// etcd and kube-apiserver are built from source, at the versions this package is
// tested with (etcd v3.6.6 from go.etcd.io/etcd/server/v3, kube-apiserver v1.36.3 from
// k8s.io/kubernetes), in Go modules of their own, so that your go.mod never requires
// etcd or Kubernetes: [SetupCommand],
//
//	go run github.com/typedinformer/typedinformer/typed/testenv/setup [-o DIR]
//
// builds them into [DefaultBinDir] (or DIR), once: about 4 minutes on 2 cores, with
// the modules downloaded through $GOPROXY; later runs find them cached and return at
// once. [FindBinaries] documents where Start looks for them: [Options.BinDir], then
// $TYPEDINFORMER_CONTROLPLANE_BIN ([EnvBinDir]), then the .cache/bin of a typedinformer
// checkout (where `make controlplane` builds), then [DefaultBinDir]. When they are
// missing, Start fails with an error that matches [ErrNoBinaries] and gives the one
// command that builds them where they were looked for.
//
// # Logs and goroutines
//
// Library code never prints: progress goes to [Options.Logger] (through the test, for
// Start), and the output of the processes to etcd.log and kube-apiserver.log in
// [Environment.Dir]. An error about a process includes the tail of its log; Start logs
// both tails when the test failed. While a process runs, two kinds of goroutine of this
// package run too, [SpawnerFunction] and [WaiterFunction]: goroutine-leak checks made
// while an Environment runs ignore them by these names.
//
// The package works on Unix systems only.
package testenv

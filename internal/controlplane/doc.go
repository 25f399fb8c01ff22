// Package controlplane starts a real, local Kubernetes control plane (etcd and
// kube-apiserver, as separate processes) on 127.0.0.1 for end-to-end tests and
// demos.
//
// Each [ControlPlane] lives in its own temporary directory, listens only on
// free loopback ports, and has its own freshly generated certificate authority,
// serving certificate and client certificates. The apiserver authenticates
// clients by certificate and authorizes them with RBAC: [ControlPlane.AdminConfig]
// is a member of system:masters, while [ControlPlane.UserConfig] has no
// permissions beyond the RBAC defaults unless a test grants them.
//
// The etcd and kube-apiserver binaries are not downloaded: they are built from
// source by `make controlplane` (internal/tools/build.sh) into .cache/bin at the
// root of the module. [Options.BinDir] or the environment variable named by
// [EnvBinDir] can point elsewhere.
//
// A test typically calls [StartForTest] once and shares the control plane
// between its subtests; starting one takes a few seconds.
//
// Library code never prints: progress goes to [Options.Logger], and the
// output of the processes goes to etcd.log and kube-apiserver.log in
// [ControlPlane.Dir]. Errors about a process that failed include the tail of
// its log.
//
// The package works on Unix systems only; on Linux the processes are also
// killed if the process that started them dies.
package controlplane

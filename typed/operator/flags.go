package operator

import (
	"flag"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/typedinformer/typedinformer/typed/webhook"
)

// Flags are the settings every operator program takes from its command line. Register
// registers them; Config builds the client configuration they name, and Options the
// Manager's options.
type Flags struct {
	// Kubeconfig (-kubeconfig) is the path of the kubeconfig file to use; when empty,
	// Config looks for one (see Config).
	Kubeconfig string
	// MetricsAddress (-metrics-bind-address) is where the Manager serves /metrics; "" or
	// "0" (controller-runtime's spelling) serves none.
	MetricsAddress string
	// MetricsAuth (-metrics-auth) has the API server authenticate and authorize every
	// scrape (manager.Options.MetricsAuth: TokenReview, then SubjectAccessReview of GET
	// on /metrics).
	MetricsAuth bool
	// HealthProbeAddress (-health-probe-bind-address) is where the Manager serves
	// /healthz and /readyz; "" or "0" serves none.
	HealthProbeAddress string
	// LeaderElection (-leader-elect) runs the loops only on the replica that holds the
	// Lease named LeaseName.
	LeaderElection bool
	// LeaderElectionNamespace (-leader-election-namespace) is the Lease's namespace; when
	// empty, Options derives it (see Options).
	LeaderElectionNamespace string
	// Identity (-identity) is this replica's identity in leader election; when empty,
	// Options derives one that no other replica has (see Options).
	Identity string
	// WebhookCertPath (-webhook-cert-path) is the directory of the webhook server's
	// certificate and key (tls.crt and tls.key, as cert-manager writes them); when set,
	// Options gives the Manager a webhook server on WebhookPort serving them, reloaded
	// when they change (manager.Options.Webhook). When empty, no webhooks are served.
	WebhookCertPath string
	// WebhookPort (-webhook-port) is the webhook server's port; webhook.DefaultPort
	// (9443, controller-runtime's) when zero.
	WebhookPort int

	// LeaseName names the Lease; it is not a flag: it is the program's, the same on every
	// replica (controller-runtime's LeaderElectionID).
	LeaseName string
	// ServiceAccountDir is where a pod's service account is mounted (token, ca.crt,
	// namespace); DefaultServiceAccountDir when empty. It is not a flag; tests set it.
	ServiceAccountDir string

	// errs are the flags Register could not register.
	errs []error
}

// DefaultServiceAccountDir is where Kubernetes mounts a pod's service account.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// Defaults returns the defaults of a deployed operator whose Lease is leaseName:
//
//   - leader election on: during a rolling update two pods of one Deployment run at once,
//     and a second replica may be added at any time; with it on, they never reconcile
//     at once. Its cost is a Lease and permission to get, create and update leases.
//     controller-runtime's generated mains default it to off, which is safe only while
//     there is never more than one process;
//   - metrics on ":8080", where controller-runtime's Manager serves them when told
//     nothing, so the scrape configurations written for it find them;
//   - health probes on ":8081", as controller-runtime's generated mains and manifests
//     expect;
//   - no webhook server until -webhook-cert-path names its certificate (a server without
//     one could not start), then on port 9443, controller-runtime's.
func Defaults(leaseName string) Flags {
	return Flags{MetricsAddress: ":8080", HealthProbeAddress: ":8081", LeaderElection: true, LeaseName: leaseName, WebhookPort: webhook.DefaultPort}
}

// Klog says whether Register registers klog's flags (-v, -vmodule, ...) too.
type Klog bool

const (
	// WithKlog registers klog's flags too (klog.InitFlags).
	WithKlog Klog = true
	// WithoutKlog registers the operator's flags only.
	WithoutKlog Klog = false
)

// Register registers the operator's flags on fs (flag.CommandLine when nil), with
// defaults' values as their defaults, and klog's flags when k is WithKlog, and returns
// the Flags that fs.Parse fills in. A flag whose name fs already has (another package
// registered it) is not registered, and Options and Run return an error wrapping ErrFlag
// that names it, rather than using a value that is not the operator's; klog's flags are
// not registered twice.
func Register(fs *flag.FlagSet, defaults Flags, k Klog) *Flags {
	if fs == nil {
		fs = flag.CommandLine
	}
	f := defaults
	f.errs = nil
	str := func(p *string, name, usage string) {
		if f.taken(fs, name) {
			return
		}
		fs.StringVar(p, name, *p, usage)
	}
	boolean := func(p *bool, name, usage string) {
		if f.taken(fs, name) {
			return
		}
		fs.BoolVar(p, name, *p, usage)
	}
	str(&f.Kubeconfig, "kubeconfig", "the kubeconfig file to use; when unset: $KUBECONFIG, the pod's service account, then ~/.kube/config")
	str(&f.MetricsAddress, "metrics-bind-address", `where to serve /metrics ("0" or "" for nowhere)`)
	boolean(&f.MetricsAuth, "metrics-auth", "have the API server authenticate and authorize every scrape of /metrics (TokenReview, SubjectAccessReview)")
	str(&f.HealthProbeAddress, "health-probe-bind-address", `where to serve /healthz and /readyz ("0" or "" for nowhere)`)
	boolean(&f.LeaderElection, "leader-elect", "reconcile only while this replica holds the Lease "+defaults.LeaseName+", so that replicas never reconcile at once")
	str(&f.LeaderElectionNamespace, "leader-election-namespace", "the Lease's namespace; when unset: $POD_NAMESPACE, the pod's service account's, then the kubeconfig context's")
	str(&f.Identity, "identity", "this replica's identity in leader election; when unset: $POD_NAME or the host name, and a unique suffix")
	str(&f.WebhookCertPath, "webhook-cert-path", "the directory of the webhook server's tls.crt and tls.key (reloaded when they change); when unset, no webhooks are served")
	if !f.taken(fs, "webhook-port") {
		fs.IntVar(&f.WebhookPort, "webhook-port", f.WebhookPort, "the webhook server's port (with -webhook-cert-path)")
	}
	if k == WithKlog && fs.Lookup("v") == nil {
		klog.InitFlags(fs)
	}
	return &f
}

// taken reports whether fs has a flag called name, recording it as an error.
func (f *Flags) taken(fs *flag.FlagSet, name string) bool {
	if fs.Lookup(name) == nil {
		return false
	}
	f.errs = append(f.errs, fmt.Errorf("%w -%s: already defined on the flag set by another package", ErrFlag, name))
	return true
}

// address returns a flag's address as the Manager takes it: "0" is none.
func address(a string) string {
	if a == "0" {
		return ""
	}
	return a
}

package operator_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/rest"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed/manager"
	"github.com/typedinformer/typedinformer/typed/operator"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		signalChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// The Lease's namespace: the flag, else $POD_NAMESPACE, else the pod's service
// account's, else the kubeconfig context's.
func TestLeaseNamespaceOrder(t *testing.T) {
	for _, c := range []struct {
		name                       string
		flag, podNamespace, saFile string
		kubeconfigNamespace        string
		inPod                      bool
		want                       string
	}{
		{"the flag over all", "flag", "env", "file", "context", true, "flag"},
		{"$POD_NAMESPACE over the service account", "", "env", "file", "context", true, "env"},
		{"the service account in a pod", "", "", "file", "", true, "file"},
		{"the service account's, with a kubeconfig", "", "", "file", "context", false, "file"},
		{"the kubeconfig context's out of a pod", "", "", "", "context", false, "context"},
		{"default when the context names none", "", "", "", "", false, "default"},
	} {
		t.Run(c.name, func(t *testing.T) {
			environment(t)
			f := operator.Defaults("lease")
			f.LeaderElectionNamespace = c.flag
			t.Setenv("POD_NAMESPACE", c.podNamespace)
			f.ServiceAccountDir = serviceAccount(t, c.saFile)
			if c.inPod {
				inPod(t)
			} else {
				f.Kubeconfig = kubeconfig(t, t.TempDir(), "https://kube.example", c.kubeconfigNamespace)
			}
			_, opts, err := f.Options()
			if err != nil {
				t.Fatal(err)
			}
			if le := opts.LeaderElection; le == nil || le.Namespace != c.want || le.Name != "lease" || le.Client == nil {
				t.Errorf("LeaderElection = %+v, want the Lease lease in %q, with a client", le, c.want)
			}
		})
	}
}

func TestNoLeaseNamespaceInAPodWithoutOneIsAnError(t *testing.T) {
	environment(t)
	inPod(t)
	f := operator.Defaults("lease")
	f.ServiceAccountDir = serviceAccount(t, "")
	if _, _, err := f.Options(); !errors.Is(err, operator.ErrFlag) || !strings.Contains(err.Error(), "-leader-election-namespace") {
		t.Errorf("Options = %v, want ErrFlag naming -leader-election-namespace", err)
	}
}

// Two replicas, even of one pod name (a StatefulSet's pod restarted), never share an
// identity; the name comes first, for a reader of the Lease.
func TestIdentitiesAreUnique(t *testing.T) {
	for _, podName := range []string{"website-0", ""} {
		environment(t)
		t.Setenv("POD_NAME", podName)
		f := operator.Defaults("lease")
		f.Kubeconfig = kubeconfig(t, t.TempDir(), "https://kube.example", "")
		prefix := podName
		if prefix == "" {
			prefix, _ = os.Hostname()
		}
		seen := map[string]bool{}
		for range 100 {
			_, opts, err := f.Options()
			if err != nil {
				t.Fatal(err)
			}
			id := opts.LeaderElection.Identity
			if seen[id] || !strings.HasPrefix(id, prefix+"_") || len(id) < len(prefix)+30 {
				t.Fatalf("identity %q: seen before %v, want %q, \"_\" and a UUID", id, seen[id], prefix)
			}
			seen[id] = true
		}
	}
	f := operator.Defaults("lease")
	f.Kubeconfig, f.Identity = kubeconfig(t, t.TempDir(), "https://kube.example", ""), "given"
	if _, opts, err := f.Options(); err != nil || opts.LeaderElection.Identity != "given" {
		t.Errorf("Options with -identity given = %+v, %v; want it as it is", opts.LeaderElection, err)
	}
}

func TestOptionsFromTheFlags(t *testing.T) {
	environment(t)
	f := operator.Flags{Kubeconfig: kubeconfig(t, t.TempDir(), "https://kube.example", ""), MetricsAddress: "0", HealthProbeAddress: ":9"}
	_, opts, err := f.Options()
	if err != nil {
		t.Fatal(err)
	}
	if opts.MetricsAddress != "" || opts.HealthProbeAddress != ":9" || opts.LeaderElection != nil || opts.MetricsAuth != nil || opts.Webhook != nil {
		t.Errorf("Options = %+v; want no metrics (\"0\"), probes on :9, no leader election, no metrics auth, no webhook server", opts)
	}
	f.WebhookCertPath = t.TempDir()
	if _, opts, err = f.Options(); err != nil || opts.Webhook == nil {
		t.Errorf("Options with -webhook-cert-path = %+v, %v; want a webhook server", opts, err)
	}
	f.WebhookCertPath = ""
	f.MetricsAddress, f.MetricsAuth = ":8080", true
	if _, opts, err = f.Options(); err != nil || opts.MetricsAuth == nil || opts.MetricsAddress != ":8080" {
		t.Errorf("Options with -metrics-auth = %+v, %v; want a MetricsAuth client", opts, err)
	}
	for _, c := range []struct {
		name string
		f    operator.Flags
		want string
	}{
		{"metrics auth without metrics", operator.Flags{MetricsAuth: true, MetricsAddress: "0"}, "-metrics-auth"},
		{"leader election without a Lease name", operator.Flags{LeaderElection: true}, "LeaseName"},
	} {
		c.f.Kubeconfig = f.Kubeconfig
		if _, _, err := c.f.Options(); !errors.Is(err, operator.ErrFlag) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Options = %v, want ErrFlag naming %s", c.name, err, c.want)
		}
	}
}

func TestNilArgumentsAreErrors(t *testing.T) {
	var f *operator.Flags
	if _, err := f.Config(); !errors.Is(err, operator.ErrNoConfig) {
		t.Errorf("nil Flags' Config = %v", err)
	}
	if _, _, err := f.Options(); !errors.Is(err, operator.ErrFlag) {
		t.Errorf("nil Flags' Options = %v", err)
	}
	build := func(*rest.Config, manager.Options) (*manager.Manager, error) { return nil, nil }
	if err := operator.Run(context.Background(), nil, build); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Run(nil flags) = %v", err)
	}
	environment(t)
	ok := operator.Flags{Kubeconfig: kubeconfig(t, t.TempDir(), "https://kube.example", "")}
	if err := operator.Run[*manager.Manager](context.Background(), &ok, nil); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Run(nil build) = %v", err)
	}
	if err := operator.Run(context.Background(), &ok, build); !errors.Is(err, controller.ErrNilArgument) {
		t.Errorf("Run with a build that returns a typed nil = %v", err)
	}
	var p *controller.PanicError
	err := operator.Run(context.Background(), &ok, func(*rest.Config, manager.Options) (*manager.Manager, error) { panic("NewForConfigOrDie") })
	if !errors.As(err, &p) || p.Value != "NewForConfigOrDie" {
		t.Errorf("Run with a build that panics = %v, want a *PanicError", err)
	}
	failed := errors.New("no")
	if err := operator.Run(context.Background(), &ok, func(*rest.Config, manager.Options) (*manager.Manager, error) { return nil, failed }); !errors.Is(err, failed) {
		t.Errorf("Run with a build that fails = %v, want its error", err)
	}
	bad := operator.Flags{Kubeconfig: "/nonexistent"}
	if err := operator.Run(context.Background(), &bad, build); err == nil || !strings.Contains(err.Error(), "/nonexistent") {
		t.Errorf("Run with a bad -kubeconfig = %v, want an error naming it", err)
	}
}

// Run runs what build makes with the options the flags say, until its context ends.
func TestRunRunsTheManagerWithTheFlagsOptions(t *testing.T) {
	environment(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f := operator.Flags{Kubeconfig: kubeconfig(t, t.TempDir(), "https://kube.example", ""), HealthProbeAddress: addr}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(ctx, &f, func(cfg *rest.Config, opts manager.Options) (*manager.Manager, error) {
			if cfg.Host != "https://kube.example" {
				t.Errorf("build's config is for %q", cfg.Host)
			}
			return manager.New(opts), nil
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz on the -health-probe-bind-address: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v after its context ended", err)
	}
}

// A -webhook-cert-path without a certificate in it is Run's error at start, naming the
// file: a webhook server that cannot serve TLS would leave the API server's calls failing.
func TestAWebhookCertPathWithoutACertificateIsRunsError(t *testing.T) {
	environment(t)
	dir := t.TempDir()
	f := operator.Flags{Kubeconfig: kubeconfig(t, t.TempDir(), "https://kube.example", ""), WebhookCertPath: dir, WebhookPort: freePort(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := operator.Run(ctx, &f, func(_ *rest.Config, opts manager.Options) (*manager.Manager, error) { return manager.New(opts), nil })
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Run with an empty -webhook-cert-path = %v, want an error naming %s", err, dir)
	}
}

// freePort returns a port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// The default -metrics-bind-address with a Manager given no MetricsHandler is Run's
// error at start, not a program that serves no metrics in silence.
func TestDefaultMetricsWithoutAHandlerIsAnError(t *testing.T) {
	environment(t)
	f := operator.Defaults("lease")
	f.Kubeconfig, f.LeaderElection, f.HealthProbeAddress = kubeconfig(t, t.TempDir(), "https://kube.example", ""), false, "0"
	err := operator.Run(context.Background(), &f, func(_ *rest.Config, opts manager.Options) (*manager.Manager, error) {
		return manager.New(opts), nil
	})
	if !errors.Is(err, manager.ErrMetricsOptions) {
		t.Errorf("Run = %v, want manager.ErrMetricsOptions", err)
	}
}

package operator_test

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/typedinformer/typedinformer/typed/operator"
)

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func TestDefaultsAreADeployedOperators(t *testing.T) {
	fs := newFlagSet()
	f := operator.Register(fs, operator.Defaults("lease"), operator.WithoutKlog)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	want := operator.Flags{MetricsAddress: ":8080", HealthProbeAddress: ":8081", LeaderElection: true, LeaseName: "lease", WebhookPort: 9443}
	if diff := cmp.Diff(want, *f, cmpopts.IgnoreUnexported(operator.Flags{})); diff != "" {
		t.Errorf("parsed defaults (-want +got):\n%s", diff)
	}
	// -help shows them as defaults.
	for name, def := range map[string]string{"metrics-bind-address": ":8080", "health-probe-bind-address": ":8081", "leader-elect": "true",
		"kubeconfig": "", "leader-election-namespace": "", "identity": "", "metrics-auth": "false", "webhook-cert-path": "", "webhook-port": "9443"} {
		if fl := fs.Lookup(name); fl == nil || fl.DefValue != def {
			t.Errorf("flag -%s: %+v, want one with default %q", name, fl, def)
		}
	}
	if fs.Lookup("v") != nil {
		t.Error("WithoutKlog registered klog's -v")
	}
}

func TestEveryFlagSetsItsField(t *testing.T) {
	fs := newFlagSet()
	f := operator.Register(fs, operator.Defaults("lease"), operator.WithKlog)
	err := fs.Parse([]string{"-kubeconfig", "/k", "-metrics-bind-address", "0", "-metrics-auth", "-health-probe-bind-address", ":9",
		"-leader-elect=false", "-leader-election-namespace", "ns", "-identity", "me", "-webhook-cert-path", "/certs", "-webhook-port", "9000", "-v", "3"})
	if err != nil {
		t.Fatal(err)
	}
	want := operator.Flags{Kubeconfig: "/k", MetricsAddress: "0", MetricsAuth: true, HealthProbeAddress: ":9",
		LeaderElectionNamespace: "ns", Identity: "me", WebhookCertPath: "/certs", WebhookPort: 9000, LeaseName: "lease"}
	if diff := cmp.Diff(want, *f, cmpopts.IgnoreUnexported(operator.Flags{})); diff != "" {
		t.Errorf("parsed flags (-want +got):\n%s", diff)
	}
	if v := fs.Lookup("v"); v == nil || v.Value.String() != "3" {
		t.Errorf("klog's -v = %v, want 3", v)
	}
}

// A flag another package registered first is neither redefined (the flag package would
// panic) nor silently taken as the operator's: Options names it.
func TestAFlagNameTakenIsAnErrorNotAPanic(t *testing.T) {
	fs := newFlagSet()
	fs.String("kubeconfig", "", "controller-runtime's, registered in its init")
	klogFirst := operator.Register(fs, operator.Defaults("lease"), operator.WithKlog)
	again := operator.Register(fs, operator.Defaults("lease"), operator.WithKlog) // klog's flags are not registered twice
	if _, _, err := klogFirst.Options(); !errors.Is(err, operator.ErrFlag) || !strings.Contains(err.Error(), "-kubeconfig") {
		t.Errorf("Options = %v, want ErrFlag naming -kubeconfig", err)
	}
	_, _, err := again.Options()
	for _, name := range []string{"-metrics-bind-address", "-leader-elect:", "-identity"} {
		if !errors.Is(err, operator.ErrFlag) || !strings.Contains(err.Error(), name) {
			t.Errorf("Options of the second Register = %v, want ErrFlag naming %s", err, name)
		}
	}
}

func TestRegisterOnANilFlagSetUsesTheCommandLine(t *testing.T) {
	saved := flag.CommandLine
	flag.CommandLine = newFlagSet() // the test binary's own is left as it is
	t.Cleanup(func() { flag.CommandLine = saved })
	f := operator.Register(nil, operator.Defaults("lease"), operator.WithoutKlog)
	if err := flag.CommandLine.Set("identity", "from-the-command-line"); err != nil {
		t.Fatal(err)
	}
	if f.Identity != "from-the-command-line" {
		t.Errorf("Identity = %q after setting flag.CommandLine's -identity", f.Identity)
	}
}

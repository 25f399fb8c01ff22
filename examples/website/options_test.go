package website

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/typedinformer/typedinformer/typed/leaderelection"
	"github.com/typedinformer/typedinformer/typed/manager"
)

// The Manager's options: Options.Manager as a main's operator.Run gives them, with the
// fields of Options that are set; the Lease is always Component, and the caller's
// leader election configuration is not changed.
func TestManagerOptions(t *testing.T) {
	cs := fake.NewClientset()
	fromMain := &leaderelection.Config{Namespace: "pods-namespace", Identity: "pod_uuid"}
	for _, c := range []struct {
		name               string
		opts               Options
		wantLease          string // namespace/identity, "" for no leader election
		wantProbes, wantMA string
	}{
		{"the fields alone", Options{Namespace: "ns", HealthProbeAddress: ":1", LeaderElection: leaderelection.Config{Identity: "a"}}, "ns/a", ":1", ""},
		{"a main's options", Options{Namespace: "ns", Manager: manager.Options{LeaderElection: fromMain, HealthProbeAddress: ":2", MetricsAddress: ":3"}},
			"pods-namespace/pod_uuid", ":2", ":3"},
		{"the fields over a main's", Options{HealthProbeAddress: ":1", LeaderElection: leaderelection.Config{Identity: "a"},
			Manager: manager.Options{LeaderElection: fromMain, HealthProbeAddress: ":2"}}, "default/a", ":1", ""},
		{"neither: alone", Options{Manager: manager.Options{MetricsAddress: ":3"}}, "", "", ":3"},
	} {
		mo := managerOptions(cs, c.opts)
		lease := ""
		if le := mo.LeaderElection; le != nil {
			lease = le.Namespace + "/" + le.Identity
			if le.Name != Component || le.Client == nil {
				t.Errorf("%s: the Lease is %q with client %v, want %q with one", c.name, le.Name, le.Client, Component)
			}
		}
		if lease != c.wantLease || mo.HealthProbeAddress != c.wantProbes || mo.MetricsAddress != c.wantMA {
			t.Errorf("%s: lease %q, probes %q, metrics %q; want %q, %q, %q", c.name, lease, mo.HealthProbeAddress, mo.MetricsAddress, c.wantLease, c.wantProbes, c.wantMA)
		}
	}
	if fromMain.Client != nil || fromMain.Name != "" {
		t.Errorf("the main's leader election configuration was changed: %+v", fromMain)
	}
}

package website

import (
	"cmp"

	"k8s.io/client-go/kubernetes"

	"github.com/typedinformer/typedinformer/typed/manager"
)

// managerOptions returns the options of the operator's Manager: opts.Manager with the
// fields of opts that are set, and the Lease named Component (see Options.Manager).
func managerOptions(cs kubernetes.Interface, opts Options) manager.Options {
	mo := opts.Manager
	switch le := opts.LeaderElection; {
	case le.Identity != "":
		le.Namespace = cmp.Or(opts.Namespace, "default")
		mo.LeaderElection = &le
	case mo.LeaderElection != nil:
		le = *mo.LeaderElection // a copy: the caller's is left as it is
		mo.LeaderElection = &le
	}
	if le := mo.LeaderElection; le != nil {
		le.Client, le.Name = cs.CoordinationV1(), Component
	}
	mo.HealthProbeAddress = cmp.Or(opts.HealthProbeAddress, mo.HealthProbeAddress)
	if opts.Metrics != nil {
		mo.Metrics = opts.Metrics
	}
	return mo
}

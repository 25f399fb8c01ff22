//go:build unix

package website_test

import (
	"testing"
	"time"

	"github.com/typedinformer/typedinformer/examples/website"
	"github.com/typedinformer/typedinformer/typed/crd"
	"github.com/typedinformer/typedinformer/typed/perturb"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// TestWebsiteOperatorCrashesOnARealServer runs the perturbation scenario's crashes on
// kube-apiserver and etcd (typed/testenv): each run in a namespace of its own, the
// successor waiting out a real Lease. A sample of the crash points, to keep it short;
// the in-memory test tries more. Quiet is long: a new leader first waits until its
// caches reach a consistent read, which on kube-apiserver takes the bookmark its watch
// cache sends about a second after it is asked, or a relist after two that did not
// come; with 1.5s, a successor that took longer was compared before it had finished.
func TestWebsiteOperatorCrashesOnARealServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Definitions: []*crd.Definition{website.Definition()}})
	operator, steps := websiteScenario()
	rep := perturb.Test(t, operator, steps, perturb.Options{Server: env.AdminConfig(), Runs: 2, Budget: 2 * time.Minute, Quiet: 3 * time.Second})
	if rep != nil && (rep.Runs == 0 || len(rep.Writes) < 8) {
		t.Errorf("%d crash runs of a reference with writes %q: the scenario did not exercise the operator", rep.Runs, rep.Writes)
	}
}

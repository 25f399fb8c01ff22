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

// TestWebsiteOperatorPerturbedOnARealServer runs the perturbation scenario on
// kube-apiserver and etcd (typed/testenv): each run in a namespace of its own, a crash's
// successor waiting out a real Lease, stale and disconnected watches made so at the
// operator's transport. One sampled run per class, to keep it short (each costs about
// twenty seconds); the in-memory test tries more. Quiet is long: a new leader first
// waits until its caches reach a consistent read, which on kube-apiserver takes the
// bookmark its watch cache sends about a second after it is asked, or a relist after
// two that did not come; with 1.5s, a successor that took longer was compared before it
// had finished. Window is short of its default (4×Quiet) but longer than Quiet, so that
// a lag or disconnection still spans a step, and its runs do not wait twelve seconds
// for one to end.
func TestWebsiteOperatorPerturbedOnARealServer(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Definitions: []*crd.Definition{website.Definition()}})
	operator, steps := websiteScenario()
	rep := perturb.Test(t, operator, steps, perturb.Options{Server: env.AdminConfig(), Runs: 3, Budget: 3 * time.Minute, Quiet: 3 * time.Second, Window: 4 * time.Second})
	if rep != nil && (rep.Runs < 3 || len(rep.Writes) < 8) {
		t.Errorf("%d perturbed runs of a reference with writes %q: the scenario did not exercise the operator", rep.Runs, rep.Writes)
	}
}

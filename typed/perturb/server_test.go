//go:build unix

package perturb_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/typedinformer/typedinformer/typed/perturb"
	"github.com/typedinformer/typedinformer/typed/testenv"
)

// The transient state found in memory is missed alike on kube-apiserver and etcd: its
// seed, replayed on a real server, disconnects the parents' watches at the controller's
// transport, and the relist after the 410 Gone shows only the final phase.
func TestAMissedTransientStateFoundInMemoryIsMissedOnARealServer(t *testing.T) {
	f := found(t, recordsRestarts(), perturb.Unobserved, "web-restarted", perturb.Options{Runs: 9})
	env := testenv.Start(t, testenv.Options{})
	rep, err := perturb.Check(logged(t), recordsRestarts(), scenario, perturb.Options{Server: env.AdminConfig(), Replay: ptr.To(f.Seed),
		Quiet: time.Second, Window: 3 * time.Second, Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 1 || len(rep.Failures) != 1 || rep.Failures[0].Perturbation != f.Perturbation || !strings.Contains(rep.Failures[0].Diff, "web-restarted") {
		t.Fatalf("seed %d on a Server: %d runs, failures %v; want exactly one like\n%v", f.Seed, rep.Runs, rep.Failures, f)
	}
	t.Logf("found on a Server: %v", rep.Failures[0])
}

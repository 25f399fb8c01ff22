package write_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/typedinformer/typedinformer/typed/write"
)

// readyReplicas returns a status mutation that sets the ready replicas to n.
func readyReplicas(n int32) func(*appsv1.DeploymentStatus) {
	return func(st *appsv1.DeploymentStatus) { st.ReadyReplicas = n }
}

// deployment returns Deployment shop/name with ready replicas.
func deployment(name string, ready int32) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready}}
}

// DESIGN 20: compare-before-write compares with a state at least as new as the writer's
// own last write. The reconciled object comes from the cache, which has not seen the
// first write yet when a second one comes (in the same reconcile, or in the next one
// before the watch delivered the first): a status brought back to the value the stale
// copy holds must still be written.
func TestStatusWriterAStatusWrittenFromAStaleCopyIsNeverLost(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	cached := srv.put(t, deployment("web", 0))
	w := write.NewStatusWriter(srv.Namespace, deploymentStatus)

	for _, n := range []int32{2, 0} {
		if err := w.Update(t.Context(), cached, readyReplicas(n)); err != nil {
			t.Fatalf("writing %d ready replicas: %v", n, err)
		}
		if got := srv.stored(t, "shop", "web").Status.ReadyReplicas; got != n {
			t.Fatalf("after writing %d ready replicas from the cached copy at resource version %s, the server has %d",
				n, cached.ResourceVersion, got)
		}
	}
	// The second write is made over the state the first one returned, so it does not
	// even conflict.
	want := []string{"update/status shop/web", "update/status shop/web"}
	if diff := cmp.Diff(want, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

// The other side of the same comparison: a status this writer already wrote costs no API
// call, although the stale copy shows the old status.
func TestStatusWriterAStatusItAlreadyWroteIsNotWrittenAgainFromAStaleCopy(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	cached := srv.put(t, deployment("web", 0))
	w := write.NewStatusWriter(srv.Namespace, deploymentStatus)

	for range 2 {
		if err := w.Update(t.Context(), cached, readyReplicas(2)); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"update/status shop/web"}, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if got := srv.stored(t, "shop", "web").Status.ReadyReplicas; got != 2 {
		t.Errorf("the server has %d ready replicas, want 2", got)
	}
}

// Once the given object is at least as new as the writer's last write (the cache caught
// up), the writer compares with it and forgets what it wrote: a newer state written by
// someone else is what counts.
func TestStatusWriterComparesWithTheGivenObjectOnceItIsAsNewAsItsOwnWrite(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	cached := srv.put(t, deployment("web", 0))
	w := write.NewStatusWriter(srv.Namespace, deploymentStatus)
	if err := w.Update(t.Context(), cached, readyReplicas(2)); err != nil {
		t.Fatal(err)
	}
	if got := w.RememberedWrites(); got != 1 {
		t.Fatalf("the writer remembers %d writes, want 1", got)
	}
	other := srv.stored(t, "shop", "web")
	other.Status.ReadyReplicas = 5
	caughtUp := srv.put(t, other) // another writer's, newer than ours
	srv.takeCalls()

	if err := w.Update(t.Context(), caughtUp, readyReplicas(5)); err != nil {
		t.Fatal(err)
	}
	if calls := srv.takeCalls(); len(calls) != 0 {
		t.Errorf("a status equal to that of an object newer than the last write was written: %v", calls)
	}
	if got := w.RememberedWrites(); got != 0 {
		t.Errorf("the writer still remembers %d writes after the cache caught up, want 0", got)
	}
}

// DESIGN 20: writes are never misapplied. A status computed from an object that has been
// deleted and created again under its name since it was read is not written to the new
// object: the reconciled object is gone (ErrGone).
func TestStatusWriterNeverWritesAStaleCopysStatusToAnObjectCreatedAgain(t *testing.T) {
	for _, wrote := range []string{"nothing", "the old object", "the new object"} {
		t.Run("this writer wrote "+wrote+" before", func(t *testing.T) {
			srv := newRVServer[*appsv1.Deployment]("deployments")
			cached := srv.put(t, deployment("web", 0))
			w := write.NewStatusWriter(srv.Namespace, deploymentStatus)
			if wrote == "the old object" {
				if err := w.Update(t.Context(), cached, readyReplicas(2)); err != nil {
					t.Fatal(err)
				}
			}
			srv.remove("shop", "web")
			recreated := srv.put(t, deployment("web", 0))
			if wrote == "the new object" {
				if err := w.Update(t.Context(), recreated, readyReplicas(7)); err != nil {
					t.Fatal(err)
				}
			} else {
				recreated.Status.ReadyReplicas = 7
				srv.put(t, recreated)
			}

			err := w.Update(t.Context(), cached, readyReplicas(1))

			checkErr(t, err, write.ErrGone)
			if got := srv.stored(t, "shop", "web"); got.UID != recreated.UID || got.Status.ReadyReplicas != 7 {
				t.Errorf("the object created again (uid %s) has uid %s and %d ready replicas, want 7: the old object's status was written to it",
					recreated.UID, got.UID, got.Status.ReadyReplicas)
			}
		})
	}
}

// UpdateStatus answers NotFound both for an object that is gone and for a kind without a
// status subresource; the writer reads the object to tell which. An object deleted and
// created again in between exists, but it is not the object whose status was written:
// that one is gone.
func TestStatusWriterNotFoundOfAnObjectCreatedAgainIsErrGoneNotErrNoStatusSubresource(t *testing.T) {
	d := withStatus("5", appsv1.DeploymentStatus{})
	d.UID = "uid-old"
	cs := kubefake.NewClientset(d)
	deployments := appsv1.SchemeGroupVersion.WithResource("deployments")
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		// Deleted before the update arrives, and created again before the writer reads it.
		if err := cs.Tracker().Delete(deployments, "shop", "web"); err != nil {
			t.Error(err)
		}
		again := withStatus("9", appsv1.DeploymentStatus{})
		again.UID = "uid-new"
		if err := cs.Tracker().Add(again); err != nil {
			t.Error(err)
		}
		return true, nil, notFound("deployments")("web")
	})
	w := write.NewStatusWriter(cs.AppsV1().Deployments, deploymentStatus)

	err := w.Update(t.Context(), d, readyReplicas(2))

	checkErr(t, err, write.ErrGone)
	if errors.Is(err, write.ErrNoStatusSubresource) {
		t.Errorf("error %v says the kind has no status subresource", err)
	}
}

// Writers serve many reconcile workers at once: each worker's stale-copy writes of its own
// objects are kept apart from the others' (run with -race).
func TestStatusWriterFromManyWorkersAtOnceLosesNoWrite(t *testing.T) {
	const objects, rounds = 16, 5
	srv := newRVServer[*appsv1.Deployment]("deployments")
	w := write.NewStatusWriter(srv.Namespace, deploymentStatus)
	var wg sync.WaitGroup
	for i := range objects {
		cached := srv.put(t, deployment(fmt.Sprintf("web-%d", i), 0))
		wg.Go(func() {
			for r := range rounds {
				// Up and back down, all from the copy read first.
				for _, n := range []int32{int32(i + r + 1), 0} {
					if err := w.Update(t.Context(), cached, readyReplicas(n)); err != nil {
						t.Errorf("%s: %v", cached.Name, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for i := range objects {
		if got := srv.stored(t, "shop", fmt.Sprintf("web-%d", i)).Status.ReadyReplicas; got != 0 {
			t.Errorf("web-%d has %d ready replicas, want 0", i, got)
		}
	}
}

// What a writer remembers of its own writes is bounded: beyond the limit the least
// recently written object is forgotten first, and nothing is kept beyond the maximum age.
// The objects remembered are still never compared with an older copy.
func TestStatusWriterRemembersABoundedNumberOfWrites(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	w := write.NewStatusWriter(srv.Namespace, deploymentStatus)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.BoundRememberedWrites(3, time.Minute, func() time.Time { return now })
	var cached []*appsv1.Deployment
	for i := range 5 {
		d := srv.put(t, deployment(fmt.Sprintf("web-%d", i), 0))
		cached = append(cached, d)
		if err := w.Update(t.Context(), d, readyReplicas(2)); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
	}
	if got := w.RememberedWrites(); got != 3 {
		t.Errorf("the writer remembers %d writes, want the limit, 3", got)
	}
	for _, d := range cached[2:] {
		if err := w.Update(t.Context(), d, readyReplicas(0)); err != nil {
			t.Fatal(err)
		}
		if got := srv.stored(t, "shop", d.Name).Status.ReadyReplicas; got != 0 {
			t.Errorf("%s, among the last written, has %d ready replicas after writing 0 from a stale copy", d.Name, got)
		}
	}
	now = now.Add(time.Minute + time.Second)
	if got := w.RememberedWrites(); got != 0 {
		t.Errorf("the writer remembers %d writes after the maximum age, want 0", got)
	}
}

// Resource versions that are not decimal cannot be ordered: a writer given an object at
// one other than its last write's reads the object from the server rather than compare
// with a copy that may be older.
func TestStatusWriterReadsTheServerWhenResourceVersionsCannotBeOrdered(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	srv.opaque = true
	cached := srv.put(t, deployment("web", 0))
	w := write.NewStatusWriter(srv.Namespace, deploymentStatus)

	for _, n := range []int32{2, 0} {
		if err := w.Update(t.Context(), cached, readyReplicas(n)); err != nil {
			t.Fatal(err)
		}
		if got := srv.stored(t, "shop", "web").Status.ReadyReplicas; got != n {
			t.Fatalf("after writing %d ready replicas the server has %d", n, got)
		}
	}
	want := []string{"update/status shop/web", "get shop/web", "update/status shop/web"}
	if diff := cmp.Diff(want, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

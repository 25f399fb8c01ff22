package write_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/write"
)

// finalizerOn returns a Finalizer named cleanupFinalizer writing through srv, and a
// pointer to the number of cleanups it ran.
func finalizerOn(srv *rvServer[*appsv1.Deployment]) (*write.Finalizer[*appsv1.Deployment], *int) {
	cleanups := new(int)
	return write.NewFinalizer(srv.Namespace, cleanupFinalizer, func(context.Context, *appsv1.Deployment) error {
		*cleanups++
		return nil
	}), cleanups
}

// deployed returns Deployment shop/web with finalizers, being deleted when deleting is
// true. (finalizing's zero deletion timestamp is lost on the way through JSON.)
func deployed(deleting bool, finalizers ...string) *appsv1.Deployment {
	d := finalizing("", false, finalizers...)
	if deleting {
		d.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
	return d
}

func handle(t *testing.T, f *write.Finalizer[*appsv1.Deployment], obj *appsv1.Deployment) (bool, error) {
	t.Helper()
	return f.Handle(t.Context(), typed.Request[*appsv1.Deployment]{Key: "shop/web", Namespace: "shop", Name: "web", Object: obj})
}

// DESIGN 20: the Finalizer decides on a state at least as new as its own last write. Once
// it has cleaned up and removed its finalizer, a stale copy that still shows the
// finalizer (the next reconcile, before the watch delivered the removal) is neither
// cleaned up again nor written: the cleanup of an object that may be gone, or replaced by
// a new one of the same name, is not run twice.
func TestFinalizerAFinalizerItRemovedIsNeitherCleanedUpNorRemovedAgainFromAStaleCopy(t *testing.T) {
	for _, tt := range []struct {
		name       string
		finalizers []string
	}{
		{"the object goes with its last finalizer", []string{cleanupFinalizer}},
		{"the object stays for another finalizer", []string{cleanupFinalizer, "other.io/keep"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRVServer[*appsv1.Deployment]("deployments")
			stale := srv.put(t, deployed(true, tt.finalizers...))
			f, cleanups := finalizerOn(srv)

			for range 2 {
				if deleted, err := handle(t, f, stale); !deleted || err != nil {
					t.Fatalf("Handle = %v, %v; want true, nil", deleted, err)
				}
			}
			if *cleanups != 1 {
				t.Errorf("cleanup ran %d times, want 1", *cleanups)
			}
			if diff := cmp.Diff([]string{"patch shop/web"}, srv.takeCalls()); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
		})
	}
}

// The same for adding: a finalizer this writer added is not added again from a stale
// copy that lacks it, with no API call (the write would conflict and be read again).
func TestFinalizerAFinalizerItAddedIsNotAddedAgainFromAStaleCopy(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	stale := srv.put(t, deployed(false))
	f, _ := finalizerOn(srv)

	for range 2 {
		if deleted, err := handle(t, f, stale); deleted || err != nil {
			t.Fatalf("Handle = %v, %v; want false, nil", deleted, err)
		}
	}
	if diff := cmp.Diff([]string{"patch shop/web"}, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{cleanupFinalizer}, srv.stored(t, "shop", "web").Finalizers); diff != "" {
		t.Errorf("stored finalizers (-want +got):\n%s", diff)
	}

	// Once the cache has caught up, it is what is compared with, and the write forgotten.
	if deleted, err := handle(t, f, srv.stored(t, "shop", "web")); deleted || err != nil {
		t.Fatalf("Handle = %v, %v; want false, nil", deleted, err)
	}
	if calls := srv.takeCalls(); len(calls) != 0 {
		t.Errorf("API calls: %v, want none", calls)
	}
	if got := f.RememberedWrites(); got != 0 {
		t.Errorf("the Finalizer still remembers %d writes after the cache caught up, want 0", got)
	}
}

// DESIGN 20: writes are never misapplied. When removing the finalizer conflicts because
// the object was deleted (its finalizer taken off by hand) and created again under its
// name, the new object's finalizer is not removed: it has cleanup of its own to come.
func TestFinalizerIsNeverRemovedFromAnObjectCreatedAgain(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	old := srv.put(t, deployed(true, cleanupFinalizer))
	var recreated *appsv1.Deployment
	srv.before("patch", func() {
		srv.remove("shop", "web")
		recreated = srv.put(t, deployed(false, cleanupFinalizer))
	})
	f, cleanups := finalizerOn(srv)

	if deleted, err := handle(t, f, old); !deleted || err != nil {
		t.Errorf("Handle = %v, %v; want true, nil: the object whose finalizer it was is gone", deleted, err)
	}
	if *cleanups != 1 {
		t.Errorf("cleanup ran %d times, want 1", *cleanups)
	}
	got := srv.stored(t, "shop", "web")
	if got.UID != recreated.UID {
		t.Fatalf("stored uid %s, want %s", got.UID, recreated.UID)
	}
	if diff := cmp.Diff([]string{cleanupFinalizer}, got.Finalizers); diff != "" {
		t.Errorf("the finalizers of the object created again (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"patch shop/web", "get shop/web"}, srv.takeCalls()); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

// Nor is the reconcile of an object deleted and created again while its finalizer was
// being added continued as if it were live: the object is gone (ErrGone), and the new one
// is left to its own reconcile, with its own state.
func TestFinalizerIsNeverAddedToAnObjectCreatedAgain(t *testing.T) {
	srv := newRVServer[*appsv1.Deployment]("deployments")
	old := srv.put(t, deployed(false))
	srv.before("patch", func() {
		srv.remove("shop", "web")
		srv.put(t, deployed(false, "other.io/keep"))
	})
	f, _ := finalizerOn(srv)

	deleted, err := handle(t, f, old)

	if !deleted {
		t.Errorf("Handle returned deleted=false: the reconcile would go on with the old object's state")
	}
	checkErr(t, err, write.ErrGone)
	if diff := cmp.Diff([]string{"other.io/keep"}, srv.stored(t, "shop", "web").Finalizers); diff != "" {
		t.Errorf("the finalizers of the object created again (-want +got):\n%s", diff)
	}
}

// Resource versions that are not decimal cannot be ordered: given an object at one other
// than its last write's, the Finalizer decides on the object as read from the server.
func TestFinalizerReadsTheServerWhenResourceVersionsCannotBeOrdered(t *testing.T) {
	for _, tt := range []struct {
		name       string
		finalizers []string
	}{
		{"the object goes with its last finalizer", []string{cleanupFinalizer}},
		{"the object stays for another finalizer", []string{cleanupFinalizer, "other.io/keep"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := newRVServer[*appsv1.Deployment]("deployments")
			srv.opaque = true
			stale := srv.put(t, deployed(true, tt.finalizers...))
			f, cleanups := finalizerOn(srv)

			for range 2 {
				if deleted, err := handle(t, f, stale); !deleted || err != nil {
					t.Fatalf("Handle = %v, %v; want true, nil", deleted, err)
				}
			}
			if *cleanups != 1 {
				t.Errorf("cleanup ran %d times, want 1", *cleanups)
			}
			if diff := cmp.Diff([]string{"patch shop/web", "get shop/web"}, srv.takeCalls()); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
		})
	}
}

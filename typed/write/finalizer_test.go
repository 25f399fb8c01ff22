package write_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"

	"github.com/typedinformer/typedinformer/controller"
	"github.com/typedinformer/typedinformer/typed"
	"github.com/typedinformer/typedinformer/typed/client"
	"github.com/typedinformer/typedinformer/typed/write"
)

const cleanupFinalizer = "example.com/cleanup"

// finalizing returns a Deployment shop/web at resource version rv with finalizers, being
// deleted when deleting is true.
func finalizing(rv string, deleting bool, finalizers ...string) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", ResourceVersion: rv, Finalizers: finalizers}}
	if deleting {
		d.DeletionTimestamp = &metav1.Time{}
	}
	return d
}

// setStored replaces the Deployment the fake holds, as another writer would.
func setStored(t *testing.T, cs *kubefake.Clientset, d *appsv1.Deployment) func() {
	return func() {
		if err := cs.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("deployments"), d, d.Namespace); err != nil {
			t.Errorf("changing the stored object: %v", err)
		}
	}
}

func TestFinalizerHandle(t *testing.T) {
	errCleanup := errors.New("the bucket is still in use")
	const (
		get   = "get deployments shop/web"
		patch = "patch deployments shop/web"
	)
	tests := []struct {
		name string
		// cached is the reconciled object, stored is the server's (cached when nil).
		cached, stored *appsv1.Deployment
		reqDeleted     bool
		react          func(t *testing.T, cs *kubefake.Clientset)
		cleanupErr     error

		wantDeleted  bool
		wantErr      error // matched with errors.Is; nil for no error
		wantCleanups int
		wantCalls    []string
		wantPatches  []string
		// wantStored is the stored object's finalizers afterwards.
		wantStored []string
	}{{
		name:        "a live object gets the finalizer, added after the others and guarded by its resource version",
		cached:      finalizing("5", false, "other.io/keep"),
		wantCalls:   []string{patch},
		wantPatches: []string{`{"metadata":{"finalizers":["other.io/keep","example.com/cleanup"],"resourceVersion":"5"}}`},
		wantStored:  []string{"other.io/keep", cleanupFinalizer},
	}, {
		name:       "a live object that has the finalizer is left alone, with no API call",
		cached:     finalizing("5", false, cleanupFinalizer),
		wantStored: []string{cleanupFinalizer},
	}, {
		name:         "an object being deleted is cleaned up, then the finalizer is removed and the others kept",
		cached:       finalizing("5", true, "other.io/keep", cleanupFinalizer),
		wantDeleted:  true,
		wantCleanups: 1,
		wantCalls:    []string{patch},
		wantPatches:  []string{`{"metadata":{"finalizers":["other.io/keep"],"resourceVersion":"5"}}`},
		wantStored:   []string{"other.io/keep"},
	}, {
		name:         "an object being deleted whose cleanup fails keeps the finalizer",
		cached:       finalizing("5", true, cleanupFinalizer),
		cleanupErr:   errCleanup,
		wantDeleted:  true,
		wantErr:      errCleanup,
		wantCleanups: 1,
		wantStored:   []string{cleanupFinalizer},
	}, {
		name:        "an object being deleted without the finalizer is neither cleaned up nor written",
		cached:      finalizing("5", true, "other.io/keep"),
		wantDeleted: true,
		wantStored:  []string{"other.io/keep"},
	}, {
		name:        "a deleted object needs nothing",
		cached:      finalizing("5", false),
		reqDeleted:  true,
		wantDeleted: true,
	}, {
		name:   "adding after a concurrent write reads the object again and keeps the finalizer that writer added",
		cached: finalizing("5", false),
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("patch", "deployments", failFirst(1, "patch", "", conflict("deployments"),
				setStored(t, cs, finalizing("6", false, "other.io/new"))))
		},
		wantCalls: []string{patch, get, patch},
		wantPatches: []string{
			`{"metadata":{"finalizers":["example.com/cleanup"],"resourceVersion":"5"}}`,
			`{"metadata":{"finalizers":["other.io/new","example.com/cleanup"],"resourceVersion":"6"}}`,
		},
		wantStored: []string{"other.io/new", cleanupFinalizer},
	}, {
		name:        "adding after a concurrent write that started the deletion adds nothing, and the object counts as deleted",
		cached:      finalizing("5", false),
		wantDeleted: true,
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("patch", "deployments", failFirst(1, "patch", "", conflict("deployments"),
				setStored(t, cs, finalizing("6", true, "other.io/keep"))))
		},
		wantCalls:   []string{patch, get},
		wantPatches: []string{`{"metadata":{"finalizers":["example.com/cleanup"],"resourceVersion":"5"}}`},
		wantStored:  []string{"other.io/keep"},
	}, {
		name:   "removing after a concurrent write retries the removal without cleaning up again",
		cached: finalizing("5", true, cleanupFinalizer, "other.io/keep"),
		react: func(t *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("patch", "deployments", failFirst(1, "patch", "", conflict("deployments"),
				setStored(t, cs, finalizing("6", true, "other.io/new", cleanupFinalizer, "other.io/keep"))))
		},
		wantDeleted:  true,
		wantCleanups: 1,
		wantCalls:    []string{patch, get, patch},
		wantPatches: []string{
			`{"metadata":{"finalizers":["other.io/keep"],"resourceVersion":"5"}}`,
			`{"metadata":{"finalizers":["other.io/new","other.io/keep"],"resourceVersion":"6"}}`,
		},
		wantStored: []string{"other.io/new", "other.io/keep"},
	}, {
		name:   "adding that conflicts every time fails with the conflict after retry.DefaultRetry's 5 tries",
		cached: finalizing("5", false),
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("patch", "deployments", failFirst(-1, "patch", "", conflict("deployments"), nil))
		},
		wantErr:     &apierrors.StatusError{ErrStatus: metav1.Status{Reason: metav1.StatusReasonConflict}},
		wantCalls:   append(repeat(4, patch, get), patch),
		wantPatches: repeat(5, `{"metadata":{"finalizers":["example.com/cleanup"],"resourceVersion":"5"}}`),
	}, {
		name:   "adding to an object already gone is ErrGone",
		cached: finalizing("5", false),
		stored: nil,
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("patch", "deployments", failFirst(-1, "patch", "", notFound("deployments"), nil))
		},
		wantDeleted: true,
		wantErr:     write.ErrGone,
		wantCalls:   []string{patch},
		wantPatches: []string{`{"metadata":{"finalizers":["example.com/cleanup"],"resourceVersion":"5"}}`},
	}, {
		name:   "removing from an object already gone is a success",
		cached: finalizing("5", true, cleanupFinalizer),
		react: func(_ *testing.T, cs *kubefake.Clientset) {
			cs.PrependReactor("patch", "deployments", failFirst(-1, "patch", "", notFound("deployments"), nil))
		},
		wantDeleted:  true,
		wantCleanups: 1,
		wantCalls:    []string{patch},
		wantPatches:  []string{`{"metadata":{"finalizers":[],"resourceVersion":"5"}}`},
		wantStored:   []string{cleanupFinalizer}, // the reactor answered NotFound; the fake still has it
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stored := tt.stored
			if stored == nil {
				stored = tt.cached.DeepCopy()
			}
			cs := kubefake.NewClientset(stored)
			if tt.react != nil {
				tt.react(t, cs)
			}
			cached := tt.cached.DeepCopy()
			cleanups := 0
			f := write.NewFinalizer(cs.AppsV1().Deployments, cleanupFinalizer, func(_ context.Context, d *appsv1.Deployment) error {
				if d.Name != "web" {
					t.Errorf("cleanup of %s, want web", d.Name)
				}
				cleanups++
				return tt.cleanupErr
			})

			deleted, err := f.Handle(t.Context(), typed.Request[*appsv1.Deployment]{
				Key: "shop/web", Namespace: "shop", Name: "web", Object: cached, Deleted: tt.reqDeleted})

			if deleted != tt.wantDeleted {
				t.Errorf("Handle returned deleted=%v, want %v", deleted, tt.wantDeleted)
			}
			checkErr(t, err, tt.wantErr)
			if cleanups != tt.wantCleanups {
				t.Errorf("cleanup ran %d times, want %d", cleanups, tt.wantCleanups)
			}
			if diff := cmp.Diff(tt.wantCalls, apiCalls(&cs.Fake)); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPatches, patches(&cs.Fake)); diff != "" {
				t.Errorf("patches (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.cached, cached); diff != "" {
				t.Errorf("Handle modified the cached object (-before +after):\n%s", diff)
			}
			if tt.stored == nil && !tt.reqDeleted {
				got, err := cs.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), "shop", "web")
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.wantStored, got.(*appsv1.Deployment).Finalizers); diff != "" {
					t.Errorf("stored finalizers (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// checkErr fails t unless err matches want (errors.Is; a *StatusError by its reason), or
// both are nil. A write's error must also be a *write.WriteError naming the object.
func checkErr(t *testing.T, err, want error) {
	t.Helper()
	var status *apierrors.StatusError
	switch {
	case want == nil:
		if err != nil {
			t.Errorf("unexpected error: %v", err)
		}
		return
	case err == nil:
		t.Errorf("no error, want one matching %v", want)
		return
	case errors.As(want, &status):
		if got := apierrors.ReasonForError(err); got != status.ErrStatus.Reason {
			t.Errorf("error %v has reason %q, want %q", err, got, status.ErrStatus.Reason)
		}
	case !errors.Is(err, want):
		t.Errorf("error %v is not %v", err, want)
	}
	var we *write.WriteError
	if errors.As(err, &we) && (we.Name == "" || we.Kind == "" || we.Op == "") {
		t.Errorf("the WriteError %#v does not say what was done to which object", we)
	}
}

func TestFinalizerGoneIsAWriteErrorThatSaysWhichObjectAndWhy(t *testing.T) {
	cs := kubefake.NewClientset() // the object is not there
	f := write.NewFinalizer(cs.AppsV1().Deployments, cleanupFinalizer, func(context.Context, *appsv1.Deployment) error { return nil })
	_, err := f.Handle(t.Context(), typed.Request[*appsv1.Deployment]{Object: finalizing("5", false)})
	var we *write.WriteError
	if !errors.As(err, &we) {
		t.Fatalf("Handle returned %v, want a *write.WriteError", err)
	}
	want := &write.WriteError{Op: "adding finalizer example.com/cleanup to", Kind: "Deployment", Namespace: "shop", Name: "web"}
	if diff := cmp.Diff(want, we, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())); diff != "" {
		t.Errorf("WriteError (-want +got):\n%s", diff)
	}
	if !errors.Is(err, write.ErrGone) || !apierrors.IsNotFound(err) {
		t.Errorf("error %v is not both ErrGone and the server's NotFound", err)
	}
	const msg = `adding finalizer example.com/cleanup to Deployment shop/web: object no longer exists: deployments.apps "web" not found`
	if err.Error() != msg {
		t.Errorf("error message\n%s\nwant\n%s", err, msg)
	}
}

func TestFinalizerThroughTheDynamicClientOnACustomResourceStruct(t *testing.T) {
	live := &Gadget{TypeMeta: gadgetMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "g", ResourceVersion: "3"}}
	dyn := fakeGadgets(t, live)
	var cleaned []string
	f := write.NewFinalizer(client.FromDynamicNamespaced[*Gadget](dyn.Resource(gadgetGVR)), cleanupFinalizer,
		func(_ context.Context, g *Gadget) error {
			cleaned = append(cleaned, g.Name)
			return nil
		})

	if deleted, err := f.Handle(t.Context(), typed.Request[*Gadget]{Object: live}); deleted || err != nil {
		t.Fatalf("Handle of a live gadget = %v, %v; want false, nil", deleted, err)
	}
	added := storedGadget(t, dyn, "lab", "g")
	if diff := cmp.Diff([]string{cleanupFinalizer}, added.Finalizers); diff != "" {
		t.Errorf("finalizers after the first Handle (-want +got):\n%s", diff)
	}

	added.DeletionTimestamp = &metav1.Time{}
	if deleted, err := f.Handle(t.Context(), typed.Request[*Gadget]{Object: added}); !deleted || err != nil {
		t.Fatalf("Handle of a gadget being deleted = %v, %v; want true, nil", deleted, err)
	}
	if diff := cmp.Diff([]string{"g"}, cleaned); diff != "" {
		t.Errorf("cleanups (-want +got):\n%s", diff)
	}
	if got := storedGadget(t, dyn, "lab", "g").Finalizers; len(got) != 0 {
		t.Errorf("finalizers after cleanup: %v, want none", got)
	}
	if diff := cmp.Diff([]string{"patch gadgets lab/g", "patch gadgets lab/g"}, apiCalls(&dyn.Fake)); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

func TestFinalizerNilArgumentsAreErrorsNotPanics(t *testing.T) {
	cs := kubefake.NewClientset()
	cleanup := func(context.Context, *appsv1.Deployment) error { return nil }
	live := typed.Request[*appsv1.Deployment]{Object: finalizing("1", false)}
	tests := []struct {
		name string
		f    *write.Finalizer[*appsv1.Deployment]
		req  typed.Request[*appsv1.Deployment]
	}{
		{"a nil Finalizer", nil, live},
		{"nil clients", write.NewFinalizer[*appsv1.Deployment, appsv1client.DeploymentInterface](nil, cleanupFinalizer, cleanup), live},
		{"clients returning nil", write.NewFinalizer(func(string) appsv1client.DeploymentInterface { return nil }, cleanupFinalizer, cleanup), live},
		{"a nil cleanup", write.NewFinalizer(cs.AppsV1().Deployments, cleanupFinalizer, nil), live},
		{"no name", write.NewFinalizer(cs.AppsV1().Deployments, "", cleanup), live},
		{"a request with no object", write.NewFinalizer(cs.AppsV1().Deployments, cleanupFinalizer, cleanup), typed.Request[*appsv1.Deployment]{Key: "shop/web"}},
		{"a nil dynamic client", write.NewFinalizer(client.FromDynamicNamespaced[*appsv1.Deployment](nil), cleanupFinalizer, cleanup), live},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.f.Handle(t.Context(), tt.req); !errors.Is(err, controller.ErrNilArgument) {
				t.Errorf("Handle returned %v, want an error wrapping ErrNilArgument", err)
			}
		})
	}
	if calls := apiCalls(&cs.Fake); len(calls) != 0 {
		t.Errorf("API calls were made: %v", calls)
	}
}
